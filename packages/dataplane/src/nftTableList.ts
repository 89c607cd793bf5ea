import { NFT_TABLE_NAMES } from '@istio-cni/capture';
import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

/**
 * The tables of a netns as `nft -j list tables` reports them. A pod's netns belongs to its tenant,
 * who may name a table anything (nft's JSON input takes any string: `;`, quotes, newlines, an
 * `include`), so the name is data: it is compared, JSON-escaped into messages, and never pasted
 * into an nft command. A table is deleted by its validated family and handle.
 */
export interface NftTableRef {
  family: NftFamily;
  name: string;
  handle: number;
}

export type NftFamily = 'ip' | 'ip6' | 'inet' | 'arp' | 'bridge' | 'netdev';

const FAMILIES: ReadonlySet<string> = new Set<NftFamily>(['ip', 'ip6', 'inet', 'arp', 'bridge', 'netdev']);
const OWN: ReadonlySet<string> = new Set(NFT_TABLE_NAMES);
/** Longest part of a name read back that goes into a message. */
const SHOWN_NAME_CHARS = 64;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses `nft -j list tables`; anything but the documented shape is an error (never guessed at). */
export function parseNftTableList(json: string): NftTableRef[] {
  // Nothing at all: a dry run's recording runner (nft itself always prints its metainfo).
  if (json.trim() === '') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch (err) {
    throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', `nft -j list tables: not JSON: ${(err as Error).message}`);
  }
  const entries = isRecord(parsed) ? parsed.nftables : undefined;
  if (!Array.isArray(entries)) throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', 'nft -j list tables: no "nftables" array');
  const tables: NftTableRef[] = [];
  for (const entry of entries) {
    if (!isRecord(entry) || !isRecord(entry.table)) continue; // metainfo
    const { family, name, handle } = entry.table;
    if (
      typeof family !== 'string' ||
      !FAMILIES.has(family) ||
      typeof name !== 'string' ||
      !Number.isSafeInteger(handle) ||
      (handle as number) <= 0
    ) {
      throw new DataplaneError('ERR_DATAPLANE_UNPARSABLE_STATE', `nft -j list tables: malformed table entry ${showJson(entry.table)}`);
    }
    tables.push({ family: family as NftFamily, name, handle: handle as number });
  }
  return tables;
}

export async function listNftTables(runner: CommandRunner, nft: string, netns: string): Promise<NftTableRef[]> {
  const { stdout } = await runner.run([nft, '-j', 'list', 'tables'], { netns });
  return parseNftTableList(stdout);
}

/** A table this project writes: one of its names, in family inet. */
export function isOwnNftTable(t: NftTableRef): boolean {
  return t.family === 'inet' && OWN.has(t.name);
}

/** `family name` of one of our tables (safe to pass to nft: both validated). */
export function nftTableKey(t: NftTableRef): string {
  return `${t.family} ${t.name}`;
}

/**
 * How a table read back is named in messages and drift reports: ours as `inet istio-proxy-nat`, any
 * other name JSON-escaped, cut to 64 characters, with its handle.
 */
export function describeNftTable(t: NftTableRef): string {
  if (isOwnNftTable(t)) return nftTableKey(t);
  const shown = t.name.length > SHOWN_NAME_CHARS ? `${t.name.slice(0, SHOWN_NAME_CHARS)}…` : t.name;
  return `${t.family} ${JSON.stringify(shown)} (handle ${t.handle})`;
}

/** The nft statement that deletes `t` by handle: nothing read back but a validated family and integer. */
export function deleteNftTableByHandle(t: NftTableRef): string {
  return `delete table ${t.family} handle ${t.handle}`;
}

function showJson(v: unknown): string {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}
