import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { runCommand } from './runCommand.ts';

/** The host state an e2e run must leave exactly as it found it. */
export interface HostSnapshot {
  netns: string[];
  links: string[];
  /** Rules per dump (iptables-legacy-save, nft list ruleset, …), counters stripped. */
  rules: Record<string, string[]>;
  ipsets: string[];
  mounts: string[];
  /** libcni's result cache and host-local's default lease store. */
  cniState: string[];
  /** `pid command` of every process running one of the rig's or the product's executables. */
  processes: string[];
}

const RULE_DUMPS: Record<string, readonly string[]> = {
  'iptables-legacy': ['iptables-legacy-save'],
  'ip6tables-legacy': ['ip6tables-legacy-save'],
  nft: ['nft', 'list', 'ruleset'],
};

const CNI_STATE_DIRS = ['/var/lib/cni/results', '/var/lib/cni/networks'];

const WATCHED_COMMANDS = new Set([
  'etcd',
  'kube-apiserver',
  'containerd',
  'containerd-shim',
  'containerd-shim-runc-v2',
  'runc',
  'pause',
  'install-cni',
  'istio-cni',
  'crictl',
  'cnitool',
  'helm',
]);

async function dump(argv: readonly string[]): Promise<string[]> {
  const { stdout, exitCode } = await runCommand(argv, { allowFailure: true });
  if (exitCode !== 0) return [`<${argv[0]} exited ${exitCode}>`];
  const lines = stdout
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('#'))
    .map((line) => line.replace(/\[\d+:\d+\]/g, '[]').replace(/counter packets \d+ bytes \d+/g, 'counter'));
  return argv[0]?.endsWith('-save') === true ? normalizeIptablesSave(lines) : normalizeNftRuleset(lines);
}

/**
 * Prefixes each `nft list ruleset` line with its table and chain, so a diff line says where it is,
 * and drops what only says a table exists: an accept-policy base chain with no rule, and a table left
 * with nothing else. iptables-nft creates those on first use and never removes them (the reference
 * bridge plugin's masquerade does, in the host netns), as merely listing a legacy table does there.
 */
function normalizeNftRuleset(lines: readonly string[]): string[] {
  const out = nftLines(lines);
  const contents = new Map<string, string[]>();
  for (const line of out) {
    const chain = /^(table \S+ \S+ chain \S+) (.+)$/.exec(line);
    if (chain) contents.set(chain[1] as string, [...(contents.get(chain[1] as string) ?? []), chain[2] as string]);
  }
  const emptyBaseChain = (key: string) => {
    const body = contents.get(key) ?? [];
    return body.length === 1 && /^type \S+ hook \S+ .*policy accept;$/.test(body[0] ?? '');
  };
  const kept = out.filter((line) => {
    const chain = /^(table \S+ \S+ chain \S+)( |$)/.exec(line);
    return chain === null || !emptyBaseChain(chain[1] as string);
  });
  return kept.filter((line) => !/^table \S+ \S+$/.test(line) || kept.some((other) => other !== line && other.startsWith(`${line} `)));
}

function nftLines(lines: readonly string[]): string[] {
  const out: string[] = [];
  let table = '';
  let chain = '';
  for (const raw of lines) {
    const line = raw.trim();
    if (line.startsWith('table ')) {
      table = line.replace(/ \{$/, '');
      chain = '';
      out.push(table);
    } else if (/^(chain|set|map|flowtable) /.test(line)) {
      chain = line.replace(/ \{$/, '');
      out.push(`${table} ${chain}`);
    } else if (line !== '}') {
      out.push(`${table} ${chain} ${line}`);
    }
  }
  return out;
}

/**
 * Prefixes each iptables-save line with its table and drops what only says a table exists: merely
 * listing a legacy table instantiates it, which is no leak. A changed built-in policy still shows.
 */
function normalizeIptablesSave(lines: readonly string[]): string[] {
  const out: string[] = [];
  let table = '';
  for (const line of lines) {
    if (line.startsWith('*')) table = line.slice(1);
    else if (line !== 'COMMIT' && !/^:[A-Z]+ ACCEPT \[\]$/.test(line)) out.push(`${table} ${line}`);
  }
  return out;
}

export async function takeHostSnapshot(): Promise<HostSnapshot> {
  const rules: Record<string, string[]> = {};
  for (const [name, argv] of Object.entries(RULE_DUMPS)) rules[name] = await dump(argv);
  const links = (await runCommand(['ip', '-o', 'link', 'show'])).stdout
    .split('\n')
    .map((line) => /^\d+:\s+([^:@\s]+)/.exec(line)?.[1])
    .filter((name): name is string => name !== undefined);
  const ipsets = (await runCommand(['ipset', 'list', '-n'], { allowFailure: true })).stdout.split('\n').filter((s) => s !== '');
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((mp): mp is string => mp !== undefined);
  // Zombies are skipped: a shim that exited is reparented to PID 1, which here reaps lazily.
  const processes = (await runCommand(['ps', '-eo', 'pid=,stat=,comm=', '--no-headers'])).stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter(([, stat, comm]) => !(stat ?? '').startsWith('Z') && WATCHED_COMMANDS.has(comm ?? ''))
    .map(([pid, , comm]) => `${pid} ${comm}`);
  return {
    netns: existsSync('/var/run/netns') ? readdirSync('/var/run/netns').sort() : [],
    links: links.sort(),
    rules,
    ipsets: ipsets.sort(),
    mounts: mounts.sort(),
    cniState: CNI_STATE_DIRS.flatMap((dir) => (existsSync(dir) ? readdirSync(dir).map((entry) => `${dir}/${entry}`) : [])).sort(),
    processes: processes.sort(),
  };
}

function added(before: readonly string[], after: readonly string[]): string[] {
  const remaining = new Map<string, number>();
  for (const item of before) remaining.set(item, (remaining.get(item) ?? 0) + 1);
  const extra: string[] = [];
  for (const item of after) {
    const n = remaining.get(item) ?? 0;
    if (n > 0) remaining.set(item, n - 1);
    else extra.push(item);
  }
  return extra;
}

/** Everything present in `after` and not in `before`, one readable line each; empty means nothing leaked. */
export function hostLeaks(before: HostSnapshot, after: HostSnapshot): string[] {
  const leaks: string[] = [];
  for (const key of ['netns', 'links', 'ipsets', 'mounts', 'cniState', 'processes'] as const) {
    for (const item of added(before[key], after[key])) leaks.push(`${key}: ${item}`);
  }
  for (const [name, lines] of Object.entries(after.rules)) {
    for (const item of added(before.rules[name] ?? [], lines)) leaks.push(`${name}: ${item}`);
  }
  return leaks;
}
