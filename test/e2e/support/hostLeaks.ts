// The pure half of the host-state check: what a snapshot holds, how rule dumps are normalized, and
// the diff that names what a run left behind. Reading the host is hostSnapshot.ts.

/** The host state a test run must leave exactly as it found it. */
export interface HostSnapshot {
  netns: string[];
  links: string[];
  /** Rules per dump (iptables-legacy-save, nft list ruleset, …), counters stripped. */
  rules: Record<string, string[]>;
  /**
   * Every table, empty ones included, read without creating any: `iptables-legacy nat` from
   * /proc/net/ip_tables_names (ip6tables-legacy from ip6_tables_names), `nft table ip nat` from
   * `nft list tables` (iptables-nft's tables are nft tables).
   */
  tables: string[];
  ipsets: string[];
  mounts: string[];
  /** Top-level cgroup directories per hierarchy, e.g. `/sys/fs/cgroup/memory/istio-cni-image-42`. */
  cgroups: string[];
  /** `key=value` of the host-wide sysctls the rig and the cluster write (e.g. `net/ipv4/ip_forward=1`). */
  sysctls: string[];
  /** Entries of the host directories a node agent or the rig writes (/run, /etc/cni/net.d, /opt/cni/bin). */
  hostPaths: string[];
  /** libcni's result cache and host-local's default lease store. */
  cniState: string[];
  /** `pid command` of every process running one of the rig's or the product's executables. */
  processes: string[];
}

type ListKey = Exclude<keyof HostSnapshot, 'rules'>;
const LIST_KEYS: readonly ListKey[] = [
  'netns',
  'links',
  'tables',
  'ipsets',
  'mounts',
  'cgroups',
  'sysctls',
  'hostPaths',
  'cniState',
  'processes',
];

/** Strips comments, blank lines and counters from a rule dump, then normalizes it by its kind. */
export function normalizeRuleDump(kind: 'iptables-save' | 'nft', stdout: string): string[] {
  const lines = stdout
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('#'))
    .map((line) => line.replace(/\[\d+:\d+\]/g, '[]').replace(/counter packets \d+ bytes \d+/g, 'counter'));
  return kind === 'iptables-save' ? normalizeIptablesSave(lines) : normalizeNftRuleset(lines);
}

/**
 * Prefixes each `nft list ruleset` line with its table and chain, so a diff line says where it is,
 * and drops what only says a table exists: an accept-policy base chain with no rule, and a table left
 * with nothing else. Whether the table itself is new is the `tables` list's job.
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
 * Prefixes each iptables-save line with its table and drops what only says a table exists (whether
 * the table is new is the `tables` list's job). A changed built-in policy still shows.
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

/** The items of `after` not matched by one in `before` (a multiset difference: duplicates count). */
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

/** Everything present in `after` and not in `before`, one `kind: item` line each; empty means nothing leaked. */
export function hostLeaks(before: HostSnapshot, after: HostSnapshot): string[] {
  const leaks: string[] = [];
  for (const key of LIST_KEYS) {
    for (const item of added(before[key], after[key]))
      leaks.push(`${key}: ${item}${key === 'sysctls' ? wasValue(before.sysctls, item) : ''}`);
  }
  for (const [name, lines] of Object.entries(after.rules)) {
    for (const item of added(before.rules[name] ?? [], lines)) leaks.push(`${name}: ${item}`);
  }
  return leaks;
}

function wasValue(before: readonly string[], item: string): string {
  const name = item.slice(0, item.indexOf('='));
  const previous = before.find((entry) => entry.startsWith(`${name}=`));
  return previous === undefined ? '' : ` (was ${previous.slice(name.length + 1)})`;
}

/**
 * The leaks of a first look that a second look, a moment later, still finds: what another process
 * on the machine had up only for a while (its own test's netns, a veth, a short-lived agent) drops out.
 */
export function persistentLeaks(first: readonly string[], second: readonly string[]): string[] {
  const still = new Set(second);
  return first.filter((leak) => still.has(leak));
}
