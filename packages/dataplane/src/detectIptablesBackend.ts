import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

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

/**
 * Chooses the iptables binaries (upstream `DetectIptablesVersion`): forced by FORCE_IPTABLES_BINARY,
 * else legacy when the legacy tables already hold rules, else iptables-nft, else plain iptables.
 *
 * Differs from upstream on purpose: the usability probe adds its rule inside a scratch netns
 * (`unshare --net`), so probing never leaves a legacy `nat` table behind on the host. Upstream's
 * probe created that table, which then made the next detection believe legacy was in use.
 * Likewise "existing rules" means real rules or user chains, not the line count of empty tables.
 */
export async function detectIptablesBackend(runner: CommandRunner, options: DetectIptablesBackendOptions = {}): Promise<IptablesBackend> {
  const forced = options.forceBinary?.trim() ?? '';
  if (forced !== '') {
    if (forced !== 'legacy' && forced !== 'nft') {
      throw new DataplaneError(
        'ERR_DATAPLANE_INVALID_ARGUMENT',
        `invalid FORCE_IPTABLES_BINARY ${JSON.stringify(forced)}: must be "legacy" or "nft"`,
      );
    }
    return probe(runner, forced, options);
  }
  if (await legacyHasRules(runner, options)) {
    const legacy = await tryProbe(runner, 'legacy', options);
    if (legacy !== undefined) return legacy;
  }
  const failures: string[] = [];
  for (const flavor of ['nft', 'plain'] as const) {
    try {
      return await probe(runner, flavor, options);
    } catch (err) {
      failures.push(`${flavor}: ${(err as Error).message}`);
    }
  }
  throw new DataplaneError('ERR_DATAPLANE_NO_IPTABLES', `failed to find a usable iptables: ${failures.join('; ')}`);
}

async function legacyHasRules(runner: CommandRunner, options: DetectIptablesBackendOptions): Promise<boolean> {
  const save = iptablesBinaries('legacy').ipv4.save;
  try {
    const { stdout } = await runner.run([save], netnsOption(options));
    return hasIptablesRules(stdout);
  } catch {
    return false;
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
