import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

async function inNetns(netnsPath: string, argv: string[]): Promise<string> {
  const { stdout } = await run('nsenter', [`--net=${netnsPath}`, '--', ...argv], { maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

export interface ProbeEntry {
  ip: string;
  uid: string;
}

/**
 * Entries of the `istio-inpod-probes-v4` probe set in a netns, as an ipset or (`nft`) in table
 * `inet istio-ambient-nat`; empty when the set does not exist.
 */
export async function probeSetEntries(
  netnsPath: string,
  backend: 'ipset' | 'nft' = 'ipset',
  set = 'istio-inpod-probes-v4',
): Promise<ProbeEntry[]> {
  if (backend === 'nft') return nftSetEntries(netnsPath, set);
  let text: string;
  try {
    text = await inNetns(netnsPath, ['ipset', 'save', set]);
  } catch {
    return [];
  }
  const entries: ProbeEntry[] = [];
  for (const line of text.split('\n')) {
    const m = /^add \S+ (\S+)(?: .*comment "([^"]*)")?/.exec(line);
    if (m) entries.push({ ip: m[1] ?? '', uid: m[2] ?? '' });
  }
  return entries.sort((a, b) => a.ip.localeCompare(b.ip));
}

/** Names of the ipsets in a netns. */
export async function ipsetNames(netnsPath: string): Promise<string[]> {
  const text = await inNetns(netnsPath, ['ipset', 'list', '-n']);
  return text.split('\n').filter((l) => l !== '');
}

/** `iptables-save` of both xtables backends in a netns, rule lines only (no comments, no counters). */
export async function iptablesRuleLines(netnsPath: string): Promise<string[]> {
  const lines: string[] = [];
  for (const cmd of ['iptables-nft-save', 'iptables-legacy-save']) {
    const text = await inNetns(netnsPath, [cmd]).catch(() => '');
    let table = '';
    for (const line of text.split('\n')) {
      if (line.startsWith('*')) table = line.slice(1);
      if (line.startsWith('-A ')) lines.push(`${cmd} ${table} ${line}`);
    }
  }
  return lines;
}

/** Lines that occur more than once (a rule programmed twice). */
export function duplicates(lines: readonly string[]): string[] {
  const seen = new Set<string>();
  const dup = new Set<string>();
  for (const l of lines) (seen.has(l) ? dup : seen).add(l);
  return [...dup];
}

/** Rule lines of an nft ruleset dump, each prefixed with its table and chain (for duplicate checks). */
export function nftRuleLines(dump: string): string[] {
  const out: string[] = [];
  let table = '';
  let chain = '';
  const nft = dump.slice(Math.max(0, dump.indexOf('== nft list ruleset')));
  for (const raw of nft.split('\n').slice(1)) {
    const line = raw.trim();
    if (line.startsWith('table ')) table = line;
    else if (line.startsWith('chain ')) chain = line;
    else if (
      line !== '}' &&
      !line.startsWith('type ') &&
      !line.startsWith('set ') &&
      !line.startsWith('elements') &&
      !line.startsWith('flags') &&
      line !== ''
    )
      out.push(`${table} ${chain} ${line}`);
  }
  return out;
}

interface NftSetJson {
  nftables: { set?: { elem?: ({ elem?: { val?: unknown; comment?: string } } | string)[] } }[];
}

async function nftSetEntries(netnsPath: string, set: string): Promise<ProbeEntry[]> {
  let text: string;
  try {
    text = await inNetns(netnsPath, ['nft', '-j', 'list', 'set', 'inet', 'istio-ambient-nat', set]);
  } catch {
    return [];
  }
  const entries: ProbeEntry[] = [];
  for (const item of (JSON.parse(text) as NftSetJson).nftables) {
    for (const e of item.set?.elem ?? []) {
      if (typeof e === 'string') entries.push({ ip: e, uid: '' });
      else entries.push({ ip: String(e.elem?.val ?? ''), uid: e.elem?.comment ?? '' });
    }
  }
  return entries.sort((a, b) => a.ip.localeCompare(b.ip));
}

/** Packets counted so far by the host probe SNAT rule (iptables of either backend, or nft). */
export async function probeSnatPackets(netnsPath: string): Promise<number> {
  let packets = 0;
  for (const cmd of ['iptables-nft-save', 'iptables-legacy-save']) {
    const text = await inNetns(netnsPath, [cmd, '-c', '-t', 'nat']).catch(() => '');
    for (const m of text.matchAll(/^\[(\d+):\d+\] -A ISTIO_POSTRT .*-j SNAT --to-source 169\.254\.7\.127$/gm)) packets += Number(m[1]);
  }
  const nft = await inNetns(netnsPath, ['nft', 'list', 'table', 'inet', 'istio-ambient-nat']).catch(() => '');
  for (const m of nft.matchAll(/counter packets (\d+) bytes \d+ snat ip to 169\.254\.7\.127/g)) packets += Number(m[1]);
  return packets;
}
