import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';
import { isBuiltinChain, isIstioChain, jumpTarget, parseIptablesSave } from './iptablesState.ts';

export type IptablesFlavor = 'legacy' | 'nft' | 'plain';
/** Which of the iptables tool families runs: `iptables*` (ipv4) or `ip6tables*` (ipv6). */
export type IptablesFamily = 'ipv4' | 'ipv6';

export interface IptablesBinaries {
  iptables: string;
  save: string;
  restore: string;
}

export interface IptablesVersion {
  major: number;
  minor: number;
  patch: number;
}

export interface IptablesBackend {
  /** Which binary set was chosen. */
  flavor: IptablesFlavor;
  /** Kernel API behind it, from the version string: `nf_tables` ⇒ nft. */
  nfTables: boolean;
  version: IptablesVersion;
  binaries: Readonly<Record<IptablesFamily, IptablesBinaries>>;
  /**
   * The binary set of the other kernel API (legacy vs nf_tables), when installed: a pod whose
   * ISTIO_* state already lives there is reconciled there instead of getting a second copy.
   */
  adoptable?: readonly IptablesBackend[];
}

export interface DetectIptablesBackendOptions {
  /** Value of FORCE_IPTABLES_BINARY (`legacy` | `nft`), read by the caller at start-up. */
  forceBinary?: string;
  /** Netns whose existing legacy rules decide the choice (default: the caller's own). */
  netns?: string;
  /** Path or name of unshare(1) for the usability probe. */
  unshare?: string;
}

const prefixes: Readonly<Record<IptablesFlavor, string>> = { legacy: '-legacy', nft: '-nft', plain: '' };

export function iptablesBinaries(flavor: IptablesFlavor): Readonly<Record<IptablesFamily, IptablesBinaries>> {
  const make = (base: string): IptablesBinaries => {
    const name = `${base}${prefixes[flavor]}`;
    return { iptables: name, save: `${name}-save`, restore: `${name}-restore` };
  };
  return { ipv4: make('iptables'), ipv6: make('ip6tables') };
}

/** Parses `iptables-save --version` output such as `iptables-save v1.8.9 (nf_tables)`. */
export function parseIptablesVersion(text: string): { version: IptablesVersion; nfTables: boolean } {
  const m = /v(\d+)\.(\d+)\.(\d+)/.exec(text);
  if (m === null) {
    throw new DataplaneError('ERR_DATAPLANE_NO_IPTABLES', `failed to parse iptables version from ${JSON.stringify(text.trim())}`);
  }
  return {
    version: { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]) },
    nfTables: text.includes('nf_tables'),
  };
}

export function versionAtLeast(v: IptablesVersion, major: number, minor: number, patch: number): boolean {
  if (v.major !== major) return v.major > major;
  if (v.minor !== minor) return v.minor > minor;
  return v.patch >= patch;
}

/** True when `iptables-save` output holds at least one rule (a table with only empty builtins does not count). */
export function hasIptablesRules(saveOutput: string): boolean {
  return saveOutput.split('\n').some((l) => l.startsWith('-A ') || /^:(?!(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) )/.test(l));
}

/** What one binary set's `iptables-save` shows in a netns, split into Istio's (ISTIO_* chains and jumps into them) and the rest. */
export interface IptablesContents {
  /** `table/CHAIN` of every ISTIO_* chain, plus `table/CHAIN -> ISTIO_X` for every jump into one from another chain. */
  istio: string[];
  /** `table/CHAIN` of every other chain that holds rules or is user-defined. */
  foreign: string[];
}

export function classifyIptablesSave(saveOutput: string): IptablesContents {
  const istio: string[] = [];
  const foreign = new Set<string>();
  for (const [table, chains] of parseIptablesSave(saveOutput)) {
    for (const [chain, rules] of chains) {
      if (isIstioChain(chain)) {
        istio.push(`${table}/${chain}`);
        continue;
      }
      for (const rule of rules) {
        const target = jumpTarget(rule) ?? '';
        if (isIstioChain(target)) istio.push(`${table}/${chain} -> ${target}`);
        else foreign.add(`${table}/${chain}`);
      }
      if (!isBuiltinChain(chain)) foreign.add(`${table}/${chain}`);
    }
  }
  return { istio, foreign: [...foreign] };
}

export interface IptablesBackendDecision {
  backend: IptablesBackend;
  /** One line for the log: what was found where, and therefore which set was chosen. */
  reason: string;
  /**
   * The other binary set when its tables in the examined netns hold ISTIO_* state (another agent's
   * leftovers, e.g. upstream's ISTIO_POSTRT): the caller removes it there rather than stack on it.
   */
  leftovers: IptablesBackend[];
}

/**
 * Chooses the iptables binaries; see {@link decideIptablesBackend}. Returns the backend only (the
 * one-shot callers: the plugin's degraded mode, `istio-iptables`).
 */
export async function detectIptablesBackend(runner: CommandRunner, options: DetectIptablesBackendOptions = {}): Promise<IptablesBackend> {
  return (await decideIptablesBackend(runner, options)).backend;
}

/**
 * Chooses the iptables binaries for a node (upstream `DetectIptablesVersion` in
 * `tools/istio-iptables/pkg/dependencies/implementation.go`, which the agent runs in the host netns):
 * forced by FORCE_IPTABLES_BINARY; else legacy when the legacy tables are in use; else
 * iptables-nft; else plain iptables.
 *
 * Differs from upstream on purpose:
 * - "in use" means rules or user chains that are not Istio's. Upstream counts 3+ lines of
 *   `iptables-legacy-save`, so an empty legacy table, or the ISTIO_POSTRT rules another Istio agent
 *   left behind, flip the node to legacy while everything else (kube-proxy, the pods' rules) is in
 *   nft. The node's own rules decide, never which Istio agent ran last: Istio state in the backend
 *   not chosen is reported as a leftover for the caller to remove (pods keep theirs, adopted).
 * - the usability probe adds its rule inside a scratch netns (`unshare --net`), so probing never
 *   leaves an empty legacy table behind. Upstream's probe adds and deletes a rule in the `filter`
 *   table of the netns it detects in (`shouldUseBinaryForCurrentContext`), and the empty table it
 *   leaves is 3+ lines to its next detection.
 * Unless forced, the chosen backend carries the other binary set as `adoptable`, so that a pod
 * whose rules already live there is reconciled in place (`choosePodIptablesBackend`).
 */
export async function decideIptablesBackend(
  runner: CommandRunner,
  options: DetectIptablesBackendOptions = {},
): Promise<IptablesBackendDecision> {
  const forced = options.forceBinary?.trim() ?? '';
  if (forced !== '') {
    if (forced !== 'legacy' && forced !== 'nft') {
      throw new DataplaneError(
        'ERR_DATAPLANE_INVALID_ARGUMENT',
        `invalid FORCE_IPTABLES_BINARY ${JSON.stringify(forced)}: must be "legacy" or "nft"`,
      );
    }
    // An explicit choice is obeyed for every pod, as upstream does: no adoption, no leftovers.
    return {
      backend: await probe(runner, forced, options),
      reason: `chose iptables-${forced}: FORCE_IPTABLES_BINARY=${forced}`,
      leftovers: [],
    };
  }
  const found = { legacy: await contentsOf(runner, 'legacy', options), nft: await contentsOf(runner, 'nft', options) };
  const where = `legacy: ${describe(found.legacy)}; nft: ${describe(found.nft)}`;
  const preferLegacy = (found.legacy?.foreign.length ?? 0) > 0 ? 'iptables-legacy holds non-Istio rules' : undefined;
  if (preferLegacy !== undefined) {
    const backend = await tryProbe(runner, 'legacy', options);
    if (backend !== undefined) return finish(runner, backend, `${preferLegacy} (${where})`, found);
  }
  const failures: string[] = [];
  for (const flavor of ['nft', 'plain'] as const) {
    try {
      const backend = await probe(runner, flavor, options);
      const why =
        preferLegacy !== undefined ? `${preferLegacy} but iptables-legacy is unusable` : 'iptables-legacy holds no non-Istio rules';
      return await finish(runner, backend, `${why} (${where})`, found);
    } catch (err) {
      failures.push(`${flavor}: ${(err as Error).message}`);
    }
  }
  throw new DataplaneError('ERR_DATAPLANE_NO_IPTABLES', `failed to find a usable iptables: ${failures.join('; ')}`);
}

async function finish(
  runner: CommandRunner,
  chosen: IptablesBackend,
  reason: string,
  found: Record<'legacy' | 'nft', IptablesContents | undefined>,
): Promise<IptablesBackendDecision> {
  const otherFlavor: 'legacy' | 'nft' = chosen.nfTables ? 'legacy' : 'nft';
  const other = await versionOnly(runner, otherFlavor);
  const backend: IptablesBackend = other === undefined ? chosen : { ...chosen, adoptable: [other] };
  const contents = found[otherFlavor];
  const leftovers = other !== undefined && contents !== undefined && contents.istio.length > 0 ? [other] : [];
  return { backend, reason: `chose ${chosen.binaries.ipv4.iptables}: ${reason}`, leftovers };
}

function describe(contents: IptablesContents | undefined): string {
  if (contents === undefined) return 'unavailable';
  if (contents.istio.length === 0 && contents.foreign.length === 0) return 'no rules';
  const parts: string[] = [];
  if (contents.foreign.length > 0)
    parts.push(`non-Istio chains ${contents.foreign.slice(0, 5).join(', ')}${contents.foreign.length > 5 ? ', ...' : ''}`);
  if (contents.istio.length > 0) parts.push(`Istio ${contents.istio.join(', ')}`);
  return parts.join(' and ');
}

async function contentsOf(
  runner: CommandRunner,
  flavor: 'legacy' | 'nft',
  options: DetectIptablesBackendOptions,
): Promise<IptablesContents | undefined> {
  try {
    const { stdout } = await runner.run([iptablesBinaries(flavor).ipv4.save], netnsOption(options));
    return classifyIptablesSave(stdout);
  } catch {
    return undefined;
  }
}

/** The binary set with its version, without the usability probe: only used where its rules already exist. */
async function versionOnly(runner: CommandRunner, flavor: 'legacy' | 'nft'): Promise<IptablesBackend | undefined> {
  const binaries = iptablesBinaries(flavor);
  try {
    const { stdout, stderr } = await runner.run([binaries.ipv4.save, '--version']);
    return { flavor, binaries, ...parseIptablesVersion(stdout || stderr) };
  } catch {
    return undefined;
  }
}

async function tryProbe(
  runner: CommandRunner,
  flavor: IptablesFlavor,
  options: DetectIptablesBackendOptions,
): Promise<IptablesBackend | undefined> {
  try {
    return await probe(runner, flavor, options);
  } catch {
    return undefined;
  }
}

async function probe(runner: CommandRunner, flavor: IptablesFlavor, options: DetectIptablesBackendOptions): Promise<IptablesBackend> {
  const binaries = iptablesBinaries(flavor);
  const { stdout, stderr } = await runner.run([binaries.ipv4.save, '--version']);
  const parsed = parseIptablesVersion(stdout || stderr);
  // The lock file is the scratch namespace itself, so the probe never waits on the host's xtables lock.
  await runner.run(
    [options.unshare ?? 'unshare', '--net', '--', binaries.ipv4.iptables, '-t', 'nat', '-A', 'INPUT', '-p', '255', '-j', 'RETURN'],
    {
      env: { XTABLES_LOCKFILE: '/proc/self/ns/net' },
    },
  );
  return { flavor, binaries, ...parsed };
}

function netnsOption(options: DetectIptablesBackendOptions): { netns?: string } {
  return options.netns === undefined ? {} : { netns: options.netns };
}
