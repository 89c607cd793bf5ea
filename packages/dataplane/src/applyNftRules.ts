import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';
import { type OpenScratchNetns, withScratchNetns } from './scratchNetns.ts';
import type { ApplyOutcome } from './applyIptablesRules.ts';

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
 * same transaction.
 */
export async function applyNftRules(deps: NftDeps, options: ApplyNftRulesOptions): Promise<ApplyOutcome> {
  const nft = deps.nft ?? 'nft';
  const existing = await ownedTables(deps.runner, nft, options.netns, options.ownedTablePrefix ?? defaultPrefix);
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
  // `add` first so `delete` cannot fail on a table that is absent; all of it is one transaction.
  const prologue = existing.flatMap((t) => [`add table ${t}`, `delete table ${t}`]);
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
  const existing = await ownedTables(deps.runner, nft, options.netns, options.ownedTablePrefix ?? defaultPrefix);
  return diffNft(deps, nft, options.netns, options.script, existing);
}

async function diffNft(deps: NftDeps, nft: string, netns: string, script: string, existing: readonly string[]): Promise<string[]> {
  const expected = await canonicalNftTables(deps, nft, script);
  const differences: string[] = [];
  for (const [table, want] of expected) {
    if (!existing.includes(table)) {
      differences.push(`missing table ${table}`);
      continue;
    }
    const have = await listTable(deps.runner, nft, netns, table);
    const diff = firstLineDifference(want, have);
    if (diff !== undefined) differences.push(`table ${table}: ${diff}`);
  }
  for (const table of existing) if (!expected.has(table)) differences.push(`unexpected table ${table}`);
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

/** `family name` of the netns's tables whose name starts with `prefix`. */
export async function ownedTables(runner: CommandRunner, nft: string, netns: string, prefix: string): Promise<string[]> {
  const { stdout } = await runner.run([nft, 'list', 'tables'], { netns });
  return stdout
    .split('\n')
    .map((l) => /^table (\S+) (\S+)$/.exec(l.trim()))
    .filter((m): m is RegExpExecArray => m !== null && (m[2] ?? '').startsWith(prefix))
    .map((m) => `${m[1]} ${m[2]}`);
}

/**
 * The netns's tables whose name starts with `prefix`, each as `nft -s list table` prints it, from
 * one `nft -s list ruleset` (one exec per pod instead of one per table).
 */
export async function readNftTables(runner: CommandRunner, nft: string, netns: string, prefix: string): Promise<Map<string, string>> {
  const { stdout } = await runner.run([nft, '-s', 'list', 'ruleset'], { netns });
  const tables = new Map<string, string>();
  let current: { key: string; lines: string[] } | undefined;
  for (const line of stdout.split('\n')) {
    const head = /^table (\S+) (\S+) \{$/.exec(line);
    if (head !== null) {
      current = { key: `${head[1]} ${head[2]}`, lines: [line] };
      continue;
    }
    if (current === undefined) continue;
    current.lines.push(line);
    if (line === '}') {
      if ((current.key.split(' ')[1] ?? '').startsWith(prefix)) tables.set(current.key, current.lines.join('\n'));
      current = undefined;
    }
  }
  return tables;
}

export async function listTable(runner: CommandRunner, nft: string, netns: string, table: string): Promise<string> {
  const [family = '', name = ''] = table.split(' ');
  const { stdout } = await runner.run([nft, '-s', 'list', 'table', family, name], { netns });
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
