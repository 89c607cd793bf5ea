import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';
import { type OpenScratchNetns, withScratchNetns } from './scratchNetns.ts';
import type { ApplyOutcome } from './applyIptablesRules.ts';
import {
  describeNftTable,
  findPrefixedNftTables,
  isOwnNftTable,
  type NftTableRef,
  nftTableKey,
  removeNftTables,
  removeOwnNftTable,
} from './nftTableList.ts';

export interface NftDeps {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  /** Path or name of nft(8). */
  nft?: string;
  /** Canonical listings by script; lets repeated checks of the same plan skip the scratch netns. */
  canonicalCache?: Map<string, Map<string, string>>;
}

export interface ApplyNftRulesOptions {
  netns: string;
  /** An `nft -f` script of `add table` / `flush table` / `add chain` / `add rule` lines (upstream istio-nftables). */
  script: string;
  /** Tables whose name starts with this belong to this rule set even when the plan lacks them. */
  ownedTablePrefix?: string;
  reconcile?: boolean;
}

const defaultPrefix = 'istio-proxy-';

/** `family name` of every table the script adds, in order. */
export function nftScriptTables(script: string): string[] {
  const tables: string[] = [];
  for (const line of script.split('\n')) {
    const m = /^add table (\S+) (\S+)\s*$/.exec(line.trim());
    if (m !== null && !tables.includes(`${m[1]} ${m[2]}`)) tables.push(`${m[1]} ${m[2]}`);
  }
  return tables;
}

/**
 * Applies an nft script in a netns as one `nft -f -` transaction.
 *
 * The script's own `add table` + `flush table` would make a plain re-apply converge, but silently:
 * stale chains would survive and a changed plan would overwrite another writer's rules. So nft
 * follows the iptables contract instead: owned tables absent → apply; present and identical (as
 * `nft -s list table` prints them, compared with the plan listed from a scratch netns) → no-op;
 * different → error unless `reconcile`, which deletes the owned tables and re-adds the plan in the
 * same transaction. Tables are found from nft's chain listings (`nftTableList.ts`): a table whose
 * name only imitates ours (a tenant's `istio-proxy-x;include"…"`) is reported and, on reconcile,
 * removed first through nft's JSON input, its name never reaching nft as syntax.
 */
export async function applyNftRules(deps: NftDeps, options: ApplyNftRulesOptions): Promise<ApplyOutcome> {
  const nft = deps.nft ?? 'nft';
  const existing = await findPrefixedNftTables(deps.runner, nft, options.netns, options.ownedTablePrefix ?? defaultPrefix);
  if (existing.length === 0) {
    await deps.runner.run([nft, '-f', '-'], { netns: options.netns, stdin: options.script });
    return 'applied';
  }
  const differences = await diffNft(deps, nft, options.netns, options.script, existing);
  if (differences.length === 0) return 'unchanged';
  if (options.reconcile !== true) {
    throw new DataplaneError(
      'ERR_DATAPLANE_STATE_CONFLICT',
      `failed to apply nftables sidecar rules in netns ${JSON.stringify(options.netns)}: ` +
        `it already holds different istio tables (reconcile would replace them): ${differences.join('; ')}`,
    );
  }
  const imitations = existing.filter((t) => !isOwnNftTable(t));
  await removeNftTables(deps.runner, nft, options.netns, imitations);
  // Ours in one transaction: the netns is never without capture between the old tables and the new.
  const prologue = existing.filter(isOwnNftTable).map(removeOwnNftTable);
  await deps.runner.run([nft, '-f', '-'], { netns: options.netns, stdin: [...prologue, options.script].join('\n') });
  return 'reconciled';
}

export interface VerifyNftRulesOptions {
  netns: string;
  script: string;
  ownedTablePrefix?: string;
}

/** Differences between the netns's owned nft tables and the script; empty means in place (CNI CHECK). */
export async function verifyNftRules(deps: NftDeps, options: VerifyNftRulesOptions): Promise<string[]> {
  const nft = deps.nft ?? 'nft';
  const existing = await findPrefixedNftTables(deps.runner, nft, options.netns, options.ownedTablePrefix ?? defaultPrefix);
  return diffNft(deps, nft, options.netns, options.script, existing);
}

async function diffNft(deps: NftDeps, nft: string, netns: string, script: string, existing: readonly NftTableRef[]): Promise<string[]> {
  const expected = await canonicalNftTables(deps, nft, script);
  const own = new Set(existing.filter(isOwnNftTable).map(nftTableKey));
  const differences: string[] = [];
  for (const [table, want] of expected) {
    if (!own.has(table)) {
      differences.push(`missing table ${table}`);
      continue;
    }
    const have = await listTable(deps.runner, nft, netns, table);
    const diff = firstLineDifference(want, have);
    if (diff !== undefined) differences.push(`table ${table}: ${diff}`);
  }
  for (const t of existing)
    if (!isOwnNftTable(t) || !expected.has(nftTableKey(t))) differences.push(`unexpected table ${describeNftTable(t)}`);
  return differences;
}

/** The script's tables as nft lists them back from a scratch netns (cached per script). */
export async function canonicalNftTables(deps: NftDeps, nft: string, script: string): Promise<Map<string, string>> {
  const cached = deps.canonicalCache?.get(script);
  if (cached !== undefined) return cached;
  const listing = await withScratchNetns(deps.openScratchNetns, async (scratch) => {
    await deps.runner.run([nft, '-f', '-'], { netns: scratch, stdin: script });
    const out = new Map<string, string>();
    for (const table of nftScriptTables(script)) out.set(table, await listTable(deps.runner, nft, scratch, table));
    return out;
  });
  deps.canonicalCache?.set(script, listing);
  return listing;
}

/**
 * The netns's tables whose name starts with `prefix`: each of ours as `nft -s list table` prints it
 * (listed one by one, by a validated name: a tenant's table or comment cannot forge lines of ours),
 * each imitation under its escaped description with an empty listing, so it shows as unexpected.
 */
export async function readNftTables(runner: CommandRunner, nft: string, netns: string, prefix: string): Promise<Map<string, string>> {
  const tables = new Map<string, string>();
  for (const t of await findPrefixedNftTables(runner, nft, netns, prefix)) {
    if (isOwnNftTable(t)) tables.set(nftTableKey(t), await listTable(runner, nft, netns, nftTableKey(t)));
    else tables.set(describeNftTable(t), '');
  }
  return tables;
}

/** `nft -s list table <family> <name>` of one of our own tables (`family name`, as our scripts write it). */
export async function listTable(runner: CommandRunner, nft: string, netns: string, table: string): Promise<string> {
  const m = /^(inet|ip|ip6) (istio-[a-z]+-[a-z]+)$/.exec(table);
  if (m === null) throw new DataplaneError('ERR_DATAPLANE_INVALID_ARGUMENT', `not a table of ours: ${JSON.stringify(table.slice(0, 80))}`);
  const { stdout } = await runner.run([nft, '-s', 'list', 'table', m[1] ?? '', m[2] ?? ''], { netns });
  return stdout.trim();
}

function firstLineDifference(want: string, have: string): string | undefined {
  const w = want.split('\n').map((l) => l.trim());
  const h = have.split('\n').map((l) => l.trim());
  for (let i = 0; i < Math.max(w.length, h.length); i++) {
    if (w[i] === h[i]) continue;
    if (h[i] === undefined) return `missing ${JSON.stringify(w[i])}`;
    if (w[i] === undefined) return `unexpected ${JSON.stringify(h[i])}`;
    return `found ${JSON.stringify(h[i])}, expected ${JSON.stringify(w[i])}`;
  }
  return undefined;
}
