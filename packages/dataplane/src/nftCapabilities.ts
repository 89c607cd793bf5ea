import { errorMessage } from '@istio-cni/cni';
import type { CommandRunner, RunOptions } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

/**
 * Whether NATIVE_NFTABLES can be honoured on this node, decided once at start as upstream's node
 * agent does (`cni/pkg/nodeagent/server_linux.go`): `nft` must run, be 1.0.1 or later and check a
 * transaction (upstream's knftables refuses otherwise: so do we); an nft built without JSON output
 * (upstream's `detect_nft_json_linux.go`) or a node still holding the iptables backend's probe
 * ipsets (`detect_artifacts_linux.go`: a live switch from iptables, complete after a reboot) keeps
 * the node on iptables, with the reason. Here the fallback covers sidecar pods too: this agent
 * reads every nft rule back as JSON, and one backend per node is what an operator can reason about.
 */
export type NftablesDecision = { nftables: true } | { nftables: false; reason: string };

export interface NftablesDecisionOptions {
  nft?: string;
  ipset?: string;
  /** Probe ipsets whose presence in the host netns means the iptables backend is still in use. */
  probeSets: readonly string[];
  /** Host netns path; undefined: the agent's own. */
  hostNetns?: string;
}

export async function decideNativeNftables(runner: CommandRunner, options: NftablesDecisionOptions): Promise<NftablesDecision> {
  const nft = options.nft ?? 'nft';
  const fail = (why: string, err?: unknown): never => {
    throw new DataplaneError(
      'ERR_DATAPLANE_NFT_UNSUPPORTED',
      `NATIVE_NFTABLES=true, but ${why}${err === undefined ? '' : `: ${errorMessage(err)}`}`,
      err === undefined ? undefined : { cause: err },
    );
  };
  const version = await runner.run([nft, '--version']).catch((err: unknown) => fail('nft cannot be run', err));
  const tooOld = tooOldNftVersion(version.stdout);
  if (tooOld !== undefined) fail(`nft ${tooOld} is too old (1.0.1 or later is needed)`);
  await runner
    .run([nft, '--check', '-f', '-'], { stdin: 'add table inet istio-cni-probe\n' })
    .catch((err: unknown) => fail('nft cannot check a transaction (permission, or a kernel without nf_tables)', err));
  const json = await runner.run([nft, '-j', 'list', 'chains']).then(
    ({ stdout }) =>
      hasJsonSchemaV1(stdout) ? undefined : `its JSON output is not json_schema_version 1 (${JSON.stringify(stdout.slice(0, 80))})`,
    (err: unknown) => `nft has no JSON output (built without it?): ${errorMessage(err)}`,
  );
  if (json !== undefined) return { nftables: false, reason: json };
  const runOptions: RunOptions = options.hostNetns === undefined ? {} : { netns: options.hostNetns };
  for (const set of options.probeSets) {
    const exists = await runner.run([options.ipset ?? 'ipset', 'list', '-n', set], runOptions).then(
      () => true,
      () => false,
    );
    if (exists)
      return { nftables: false, reason: `the iptables backend's probe ipset ${set} exists (reboot the node to complete the switch)` };
  }
  return { nftables: true };
}

/** The host table native nftables writes its probe rules and sets into (`buildAmbientHostNftRules`). */
export const NFT_HOST_TABLE = { family: 'inet', name: 'istio-ambient-nat' } as const;

/**
 * Whether the host netns holds this project's native nftables host table (`inet istio-ambient-nat`,
 * the probe sets inside it): the node ran with NATIVE_NFTABLES=true and its ambient pods' rules are
 * in nft. The mirror of the iptables probe-ipset check above, for a node restarted with it false.
 * `nft list tables inet` is read as data: only a line naming exactly that table counts.
 */
export async function holdsNftHostTable(runner: CommandRunner, options: { nft?: string; hostNetns?: string } = {}): Promise<boolean> {
  const runOptions: RunOptions = options.hostNetns === undefined ? {} : { netns: options.hostNetns };
  const listed = await runner.run([options.nft ?? 'nft', 'list', 'tables', NFT_HOST_TABLE.family], runOptions).then(
    ({ stdout }) => stdout,
    () => '', // no nft, or no nf_tables: nothing of ours can be there
  );
  const wanted = `table ${NFT_HOST_TABLE.family} ${NFT_HOST_TABLE.name}`;
  return listed.split('\n').some((line) => line.trim() === wanted);
}

/** `v0.9.8` or `v1.0.0` from `nft --version` when older than 1.0.1, else undefined (a version it cannot read is not refused). */
export function tooOldNftVersion(versionOutput: string): string | undefined {
  const m = /^nftables v(\d+)\.(\d+)\.(\d+)/.exec(versionOutput.trim());
  if (m === null) return undefined;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const old = major === 0 || (major === 1 && minor === 0 && patch === 0);
  return old ? `v${major}.${minor}.${patch}` : undefined;
}

function hasJsonSchemaV1(text: string): boolean {
  try {
    const parsed = JSON.parse(text) as { nftables?: { metainfo?: { json_schema_version?: unknown } }[] };
    return Array.isArray(parsed.nftables) && parsed.nftables.some((e) => e.metainfo?.json_schema_version === 1);
  } catch {
    return false;
  }
}
