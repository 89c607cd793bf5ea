import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Every dump that can hold capture state: both xtables backends, both families, and native nft. */
const DUMPS: readonly (readonly string[])[] = [
  ['iptables-legacy-save'],
  ['ip6tables-legacy-save'],
  ['iptables-nft-save'],
  ['ip6tables-nft-save'],
  ['nft', 'list', 'ruleset'],
];

/** Strips what differs between two identical rule sets: comments (timestamps) and counters. */
export function normalizeRuleDump(text: string): string {
  return text
    .split('\n')
    .filter((line) => !line.startsWith('#') && line.trim() !== '')
    .map((line) => line.replace(/\[\d+:\d+\]/g, '[0:0]').replace(/counter packets \d+ bytes \d+/g, 'counter'))
    .join('\n');
}

/**
 * The netfilter state of a network namespace (entered with `nsenter --net`), each dump under its
 * command name, normalized so two namespaces programmed alike compare equal.
 */
export async function netnsRuleset(netnsPath: string): Promise<string> {
  const parts: string[] = [];
  for (const argv of DUMPS) {
    const { stdout } = await run('nsenter', [`--net=${netnsPath}`, '--', ...argv], { maxBuffer: 16 * 1024 * 1024 });
    parts.push(`== ${argv.join(' ')}\n${normalizeRuleDump(stdout)}`);
  }
  return parts.join('\n');
}

/** The outbound capture chain, as iptables (`ISTIO_OUTPUT`) or native nftables (`istio-output`) names it. */
export const CAPTURE_CHAIN = /ISTIO_OUTPUT|chain istio-output /;

/** Any istio-owned chain or table in a dump: a pod that was skipped shows none. */
export const ANY_ISTIO_STATE = /ISTIO_|istio-/;

/**
 * The backends that hold capture state in a `netnsRuleset` dump: `iptables` (a jump from a built-in
 * chain into an ISTIO_* chain, in either flavor's save), `nft` (a native table `istio-*`).
 */
export function captureBackends(dump: string): ('iptables' | 'nft')[] {
  const held: ('iptables' | 'nft')[] = [];
  if (/^-A [A-Z]+ .*-j ISTIO_/m.test(dump)) held.push('iptables');
  if (/^table inet istio-/m.test(dump)) held.push('nft');
  return held;
}
