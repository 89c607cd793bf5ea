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

/** Entries of the `istio-inpod-probes-v4` ipset in a netns; empty when the set does not exist. */
export async function probeSetEntries(netnsPath: string, set = 'istio-inpod-probes-v4'): Promise<ProbeEntry[]> {
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
