import { NFT_TABLE_NAMES } from '@istio-cni/capture';
import { CommandError, type CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

/**
 * A table of a netns as nft reports it. A pod's netns belongs to its tenant, who may name a table
 * anything (nft's JSON input takes any string: `;`, quotes, newlines, an `include`), so the name is
 * data: it is compared, JSON-escaped into messages, and reaches nft again only as a JSON string
 * (`removeNftTablesJson`), never pasted into nft's own syntax.
 */
export interface NftTableRef {
  family: NftFamily;
  name: string;
  /**
   * A table without chains: seen as a header line of `nft list chains` (text) and confirmed to
   * exist under that name (a name with a newline forges header lines). It touches no packet; it is
   * reported, and removed by name through nft's JSON input.
   */
  chainless?: true;
}

export type NftFamily = 'ip' | 'ip6' | 'inet' | 'arp' | 'bridge' | 'netdev';

const FAMILIES: ReadonlySet<string> = new Set<NftFamily>(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);
const OWN: ReadonlySet<string> = new Set(NFT_TABLE_NAMES);
/** Longest part of a name read back that goes into a message. */
const SHOWN_NAME_CHARS = 64;
/** The kernel's longest table name (NFT_NAME_MAXLEN, with its NUL): a longer header line was forged. */
const MAX_NAME_BYTES = 255;
/** Tables without chains confirmed one by one when one header line was forged; any more are not looked at. */
const MAX_CHAINLESS_CHECKS = 32;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The tables that hold a chain, from `nft -j list chains`; anything but the documented shape is an error (never guessed at). */
export function parseNftChainTables(json: string): NftTableRef[] {
  // Nothing at all: a dry run's recording runner (nft itself always prints its metainfo).
  if (json.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch (err) {
    throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', `nft -j list chains: not JSON: ${(err as Error).message}`);
  }
  const entries = isRecord(parsed) ? parsed.nftables : undefined;
  if (!Array.isArray(entries)) throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', 'nft -j list chains: no "nftables" array');
  const tables = new Map<string, NftTableRef>();
  for (const entry of entries) {
    if (!isRecord(entry) || !isRecord(entry.chain)) continue; // metainfo
    const { family, table } = entry.chain;
    if (typeof family !== 'string' || !FAMILIES.has(family) || typeof table !== 'string' || !isSendableName(table)) {
      throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', `nft -j list chains: malformed chain entry ${showJson(entry.chain)}`);
    }
    tables.set(tableId(family, table), { family: family as NftFamily, name: table });
  }
  return [...tables.values()];
}

/**
 * Every `table <family> <name> {` header line of `nft list chains` (text): nft prints one for each
 * table, chains or not. Names are printed raw, so a header may be forged by a name with a newline;
 * these are only ever compared, described and sent back as JSON strings.
 */
export function parseNftTableHeaders(text: string): NftTableRef[] {
  const tables: NftTableRef[] = [];
  for (const line of text.split('\n')) {
    const m = /^table (\S+) (.+) \{$/.exec(line);
    if (m === null || !FAMILIES.has(m[1] ?? '')) continue;
    const name = m[2] ?? '';
    if (!isSendableName(name)) continue;
    tables.push({ family: m[1] as NftFamily, name });
  }
  return tables;
}

/**
 * The netns's tables whose name starts with `prefix`: ours, and any imitating ours. nft 1.0.6 reads
 * every rule of the netns for `nft list tables` (3.6 s and 220 MB of nft at 100k rules of a tenant's);
 * it answers `nft list chains` from the table and chain lists alone (0.01 s). So tables are found from
 * the chains' JSON (exact names) and, for the tables without chains, from the text's header lines,
 * each confirmed under its name (`nft -c` of its deletion): a table whose name holds a newline forges
 * header lines, and one without chains whose name does is not seen at all (it touches no packet).
 * One of ours without chains is nothing to report (the plan's `add table` takes it back).
 */
export async function findPrefixedNftTables(runner: CommandRunner, nft: string, netns: string, prefix: string): Promise<NftTableRef[]> {
  const json = await runner.run([nft, '-j', 'list', 'chains'], { netns });
  const withChains = parseNftChainTables(json.stdout).filter((t) => t.name.startsWith(prefix));
  const text = await runner.run([nft, 'list', 'chains'], { netns });
  const seen = new Set(withChains.map((t) => tableId(t.family, t.name)));
  const candidates: NftTableRef[] = [];
  for (const t of parseNftTableHeaders(text.stdout)) {
    const id = tableId(t.family, t.name);
    if (!t.name.startsWith(prefix) || isOwnNftTable(t) || seen.has(id)) continue;
    seen.add(id);
    candidates.push({ ...t, chainless: true });
  }
  return [...withChains, ...(await existingNftTables(runner, nft, netns, candidates))];
}

/** The tables of `candidates` that exist under their names: a document at a time, else one by one (a forged line among them). */
async function existingNftTables(runner: CommandRunner, nft: string, netns: string, candidates: NftTableRef[]): Promise<NftTableRef[]> {
  const found: NftTableRef[] = [];
  let singleChecks = 0;
  for (const group of chunks(candidates)) {
    if (await nftTablesExist(runner, nft, netns, group)) {
      found.push(...group);
      continue;
    }
    for (const t of group) {
      if (singleChecks++ >= MAX_CHAINLESS_CHECKS) return found;
      if (await nftTablesExist(runner, nft, netns, [t])) found.push(t);
    }
  }
  return found;
}

/** Whether nft would delete every one of `tables` (`-c`: checked by the kernel, nothing changed). */
async function nftTablesExist(runner: CommandRunner, nft: string, netns: string, tables: readonly NftTableRef[]): Promise<boolean> {
  const document = { nftables: tables.map((t) => ({ delete: { table: { family: t.family, name: t.name } } })) };
  try {
    await runner.run(nftJsonArgv(nft, document, true), { netns });
    return true;
  } catch (err) {
    if (err instanceof CommandError && err.code === 'ERR_DATAPLANE_COMMAND_FAILED' && err.stderr.includes('No such file or directory'))
      return false;
    throw err;
  }
}

/** A table this project writes: one of its names, in family inet. */
export function isOwnNftTable(t: Pick<NftTableRef, 'family' | 'name'>): boolean {
  return t.family === 'inet' && OWN.has(t.name);
}

/** `family name` of one of our tables (safe to pass to nft: both validated). */
export function nftTableKey(t: NftTableRef): string {
  return `${t.family} ${t.name}`;
}

/**
 * How a table read back is named in messages and drift reports: ours as `inet istio-proxy-nat`, any
 * other name JSON-escaped and cut to 64 characters.
 */
export function describeNftTable(t: NftTableRef): string {
  if (isOwnNftTable(t)) return nftTableKey(t);
  const shown = t.name.length > SHOWN_NAME_CHARS ? `${t.name.slice(0, SHOWN_NAME_CHARS)}…` : t.name;
  return `${t.family} ${JSON.stringify(shown)}${t.chainless === true ? ' (no chains)' : ''}`;
}

/**
 * The nft statements that remove one of our tables whether or not it is there (`add` then `delete`
 * in one transaction: a table gone since it was listed cannot fail the transaction).
 */
export function removeOwnNftTable(t: NftTableRef): string {
  if (!isOwnNftTable(t)) throw new DataplaneError('ERR_DATAPLANE_INVALID_ARGUMENT', `not a table of ours: ${describeNftTable(t)}`);
  return `add table ${nftTableKey(t)}\ndelete table ${nftTableKey(t)}`;
}

/**
 * Removes `tables` by name through nft's JSON input, each added then deleted (never fails for one
 * gone since it was listed): the names travel as JSON strings, never as syntax.
 */
export async function removeNftTables(runner: CommandRunner, nft: string, netns: string, tables: readonly NftTableRef[]): Promise<void> {
  for (const group of chunks(tables)) {
    const nftables = group.flatMap((t) => {
      const table = { family: t.family, name: t.name };
      return [{ add: { table } }, { delete: { table } }];
    });
    await runner.run(nftJsonArgv(nft, { nftables }), { netns });
  }
}

/**
 * A name nft's JSON input takes as a string: jansson refuses a NUL or a lone surrogate, and nft then
 * parses the whole document as its own syntax instead. The kernel holds neither, nor a longer name.
 */
function isSendableName(name: string): boolean {
  return name !== '' && !name.includes('\u0000') && name.isWellFormed() && Buffer.byteLength(name) <= MAX_NAME_BYTES;
}

/**
 * `nft -j <document>` (`-c`: checked only): the document as one argument, not stdin (nft opens
 * /dev/stdin for JSON input, which the socket a child's stdin is cannot be). Names are JSON strings.
 */
function nftJsonArgv(nft: string, document: { nftables: unknown[] }, check = false): string[] {
  return [nft, ...(check ? ['-c'] : []), '-j', JSON.stringify(document)];
}

/** Tables per JSON document: at most ~90 KiB of names, well under one argument's 128 KiB (MAX_ARG_STRLEN). */
const TABLES_PER_DOCUMENT = 100;

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += TABLES_PER_DOCUMENT) out.push(items.slice(i, i + TABLES_PER_DOCUMENT));
  return out;
}

function tableId(family: string, name: string): string {
  return JSON.stringify([family, name]);
}

function showJson(v: unknown): string {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}
