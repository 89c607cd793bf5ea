import { errorMessage } from '@istio-cni/cni';
import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

/**
 * What native nftables mode needs of the node's `nft`, checked once at start (as upstream's
 * knftables does before its first use: version, then a checked transaction), plus JSON output,
 * which this agent reads every rule back through. Without it each pod's capture would fail at its
 * first read-back, for good; refusing at start names the cause instead.
 */
export async function checkNftCapabilities(runner: CommandRunner, nft = 'nft'): Promise<void> {
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
  const listing = await runner
    .run([nft, '-j', 'list', 'chains'])
    .catch((err: unknown) => fail('nft has no JSON output (built without it?)', err));
  if (!hasJsonSchemaV1(listing.stdout))
    fail(`nft's JSON output is not json_schema_version 1: ${JSON.stringify(listing.stdout.slice(0, 120))}`);
  await runner
    .run([nft, '--check', '-f', '-'], { stdin: 'add table inet istio-cni-probe\n' })
    .catch((err: unknown) => fail('nft cannot check a transaction (permission, or a kernel without nf_tables)', err));
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
