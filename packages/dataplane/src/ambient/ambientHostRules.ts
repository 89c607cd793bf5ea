import {
  type AmbientConfig,
  ambientHostIptablesDeletePlan,
  ambientHostNftRulesDeleteScript,
  ambientProbeSetName,
  ambientProbeSetsCreateScript,
  buildAmbientHostIptablesRules,
  buildAmbientHostNftRules,
  renderAmbientHostNftTransaction,
  renderIptablesRestore,
} from '@istio-cni/capture';
import {
  applyIptablesRules,
  canonicalIptablesState,
  type IptablesDocuments,
  readIptablesState,
  verifyIptablesRules,
} from '../applyIptablesRules.ts';
import type { CommandRunner, RunOptions } from '../commandRunner.ts';
import { diffIptablesState } from '../iptablesState.ts';
import { type OpenScratchNetns, withScratchNetns } from '../scratchNetns.ts';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import type { AmbientRuleBackend, AmbientRulesDeps } from './ambientPodRules.ts';

export interface AmbientHostRulesOptions {
  config: AmbientConfig;
  backend: AmbientRuleBackend;
  /** Host netns path (`/host/proc/1/ns/net` with `ALLOW_SWITCH_TO_HOST_NS`); default: the agent's own. */
  hostNetns?: string;
  /** The kubelet's UID (`findKubeletUid`); required for the nft backend. */
  kubeletUid?: number;
  /** Path or name of ipset(8), used to give the scratch netns the probe sets the rules reference. */
  ipset?: string;
}

const hostTable = 'inet istio-ambient-nat';
/** Copies of one host jump removed at most (each a command): beyond that the repair reports failure. */
const MAX_COPIES_DELETED = 16;

/**
 * Start-up as upstream: for iptables the POSTROUTING jump into ISTIO_POSTRT and the
 * `--socket-exists` probe-set SNAT, left alone when exactly in place in the node's backend (as
 * upstream's `executeCommands`, which verifies the state first), else the old ones removed and the
 * plan applied; for nft the probe sets (created if missing, never emptied here) and the
 * kubelet-UID SNAT rule in one transaction. Removing rules that are in place would leave a moment
 * in which kubelet's probes of enrolled pods are not SNATed and fail (an agent restart, a switch
 * from upstream's agent). The probe sets must exist first (`ProbeSetManager.create`) for iptables.
 */
export async function createAmbientHostRules(deps: AmbientRulesDeps, options: AmbientHostRulesOptions): Promise<void> {
  const host = hostContext(deps, options);
  if (options.backend.kind === 'nft') {
    await host.runner
      .run([deps.nft ?? 'nft', '-f', '-'], { netns: host.netns, stdin: nftHostScript(options) })
      .catch((err: unknown) => failed('create', err));
    return;
  }
  if (await iptablesHostRulesInPlace(host, options)) return;
  await deleteAmbientHostRules(deps, options);
  await applyIptablesRules(
    { runner: host.runner, openScratchNetns: host.openScratchNetns },
    { netns: host.netns, backend: options.backend.iptables, documents: hostDocuments(options.config) },
  ).catch((err: unknown) => failed('create', err));
}

/** Removes the host rules; absent rules are fine. Probe sets are left (see `ProbeSetManager.destroy`). */
export async function deleteAmbientHostRules(deps: AmbientRulesDeps, options: AmbientHostRulesOptions): Promise<void> {
  const host = hostContext(deps, options);
  if (options.backend.kind === 'nft') {
    await host.runner
      .run([deps.nft ?? 'nft', '-f', '-'], { netns: host.netns, stdin: ambientHostNftRulesDeleteScript() })
      .catch((err: unknown) => failed('delete', err));
    return;
  }
  const backend = options.backend.iptables;
  const plan = ambientHostIptablesDeletePlan(options.config);
  for (const [family, commands] of [
    ['ipv4', plan.v4],
    ['ipv6', plan.v6],
  ] as const) {
    for (const args of commands) {
      // Each step is optional (a clean node has none of them). A jump is deleted until none is left:
      // a second copy (an operator's, a half-done restore) would keep the chain referenced.
      const tries = args.includes('-D') ? MAX_COPIES_DELETED : 1;
      for (let i = 0; i < tries; i++) {
        const deleted = await host.runner.run([backend.binaries[family].iptables, '-w', ...args], { netns: host.netns }).then(
          () => true,
          () => false,
        );
        if (!deleted) break;
      }
    }
  }
}

/** Differences between the host rules and the plan; empty means in place. */
export async function verifyAmbientHostRules(deps: AmbientRulesDeps, options: AmbientHostRulesOptions): Promise<string[]> {
  const host = hostContext(deps, options);
  if (options.backend.kind === 'iptables') {
    return verifyIptablesRules(
      { runner: host.runner, openScratchNetns: host.openScratchNetns },
      { netns: host.netns, backend: options.backend.iptables, documents: hostDocuments(options.config) },
    );
  }
  const nft = deps.nft ?? 'nft';
  const list = (netns: string) =>
    host.runner.run([nft, '-s', 'list', 'chain', ...hostTable.split(' '), 'postrouting'], { netns }).then(
      ({ stdout }) => stdout.trim(),
      () => '',
    );
  const want = await withScratchNetns(deps.openScratchNetns, async (scratch) => {
    await deps.runner.run([nft, '-f', '-'], { netns: scratch, stdin: nftHostScript(options) });
    return list(scratch);
  });
  const have = await list(host.netns);
  if (have === '') return [`missing chain ${hostTable} postrouting`];
  return have === want ? [] : [`chain ${hostTable} postrouting is ${JSON.stringify(have)}, expected ${JSON.stringify(want)}`];
}

/** The node backend's ISTIO_* host state is exactly the plan's, for every family (no second copy of a rule either). */
async function iptablesHostRulesInPlace(
  host: { runner: CommandRunner; netns: string; openScratchNetns: OpenScratchNetns },
  options: AmbientHostRulesOptions,
): Promise<boolean> {
  if (options.backend.kind !== 'iptables') return false;
  const backend = options.backend.iptables;
  const documents = hostDocuments(options.config);
  for (const family of ['ipv4', 'ipv6'] as const) {
    const document = documents[family];
    if (document === undefined) continue;
    const actual = await readIptablesState(host.runner, backend, family, host.netns).catch(() => undefined);
    // Nothing of ours there (a fresh node): no need for the plan's canonical form.
    if (actual === undefined || !diffIptablesState(new Map(), actual).residue) return false;
    const expected = await canonicalIptablesState(
      { runner: host.runner, openScratchNetns: host.openScratchNetns },
      backend,
      family,
      document,
    );
    const diff = diffIptablesState(expected, actual);
    if (!diff.residue || diff.differences.length > 0) return false;
  }
  return true;
}

function hostDocuments(config: AmbientConfig): IptablesDocuments {
  const rules = buildAmbientHostIptablesRules(config);
  const documents: IptablesDocuments = { ipv4: renderIptablesRestore(rules.v4) };
  if (rules.v6.length > 0) documents.ipv6 = renderIptablesRestore(rules.v6);
  return documents;
}

function nftHostScript(options: AmbientHostRulesOptions): string {
  if (options.kubeletUid === undefined) {
    throw new AmbientDataplaneError(
      'ERR_AMBIENT_HOST_RULES',
      'failed to build nft host rules: the kubelet UID is required (findKubeletUid)',
    );
  }
  return (
    ambientProbeSetsCreateScript(options.config) +
    renderAmbientHostNftTransaction(buildAmbientHostNftRules(options.config, options.kubeletUid))
  );
}

function failed(what: 'create' | 'delete', err: unknown): never {
  throw new AmbientDataplaneError('ERR_AMBIENT_HOST_RULES', `failed to ${what} host probe rules: ${(err as Error).message}`, {
    cause: err,
  });
}

/** Marks commands meant for the host; never a real path, so scratch and pod calls pass untouched. */
const currentNetns = '/proc/self/ns/net';

/**
 * The shared iptables pipeline expects a netns path and points the legacy xtables lock at it.
 * On the host the normal global lock must be used (kube-proxy and others write there), and with
 * no host path configured the command runs in place. The scratch netns used for canonical
 * listings gets the probe ipsets, without which `-m set --match-set` cannot be restored.
 */
function hostContext(
  deps: AmbientRulesDeps,
  options: AmbientHostRulesOptions,
): { runner: CommandRunner; netns: string; openScratchNetns: OpenScratchNetns } {
  const netns = options.hostNetns ?? currentNetns;
  const runner: CommandRunner = {
    run(argv, runOptions: RunOptions = {}) {
      if (runOptions.netns !== netns) return deps.runner.run(argv, runOptions);
      // The node's netns belongs to the node's user namespace: nothing to enter besides it.
      const { env, netns: _netns, enterNetnsOwner: _owner, ...rest } = runOptions;
      const cleanEnv = env === undefined ? undefined : Object.fromEntries(Object.entries(env).filter(([k]) => k !== 'XTABLES_LOCKFILE'));
      return deps.runner.run(argv, {
        ...rest,
        ...(options.hostNetns === undefined ? {} : { netns: options.hostNetns }),
        ...(cleanEnv === undefined || Object.keys(cleanEnv).length === 0 ? {} : { env: cleanEnv }),
      });
    },
  };
  const ipset = options.ipset ?? 'ipset';
  const families: (4 | 6)[] = options.config.enableIPv6 ? [4, 6] : [4];
  const openScratchNetns: OpenScratchNetns = async () => {
    const scratch = await deps.openScratchNetns();
    try {
      for (const family of families) {
        await deps.runner.run(
          [ipset, 'create', ambientProbeSetName(family), 'hash:ip', 'comment', 'family', family === 4 ? 'inet' : 'inet6', '-exist'],
          {
            netns: scratch.path,
          },
        );
      }
    } catch (err) {
      await scratch.close();
      throw err;
    }
    return scratch;
  };
  return { runner, netns, openScratchNetns };
}
