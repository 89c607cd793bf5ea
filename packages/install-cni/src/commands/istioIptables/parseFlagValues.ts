import {
  MAX_LIST_ITEMS,
  MAX_VALUE_LENGTH,
  parseCidrList,
  parseGoBool,
  parseGroupList,
  parseGroupListOrWildcard,
  parseInterfaceList,
  parseOwnerIdList,
  parsePort,
  parsePortList,
} from '@istio-cni/capture';
import type { InterceptionMode, Wildcard } from '@istio-cni/capture';
import { parseCidr, type Cidr } from '@istio-cni/cni';
import type { LogThreshold } from '@istio-cni/handoff';

/**
 * Parsers for istio-iptables flag values. Each throws a plain Error with the reason; the caller
 * adds the flag name and the value. Lists follow upstream `config.Split`: split on `,` and drop
 * empty items, so `6000,7000,` is two ports.
 */

function dropEmptyItems(value: string): string {
  if (value.length > MAX_VALUE_LENGTH) throw new Error(`value longer than ${MAX_VALUE_LENGTH} characters`);
  const items = value.split(',').filter((item) => item !== '');
  if (items.length > MAX_LIST_ITEMS) throw new Error(`more than ${MAX_LIST_ITEMS} items`);
  return items.join(',');
}

/** Go `strconv.ParseBool`, as pflag reads `--flag=value`. */
export function parseBool(value: string): boolean {
  const parsed = parseGoBool(value);
  if (parsed === undefined) throw new Error('must be a boolean (true, false, 1, 0, t, f)');
  return parsed;
}

export function parseSinglePort(value: string): number {
  return parsePort(value);
}

export function parsePorts(value: string): number[] {
  const list = dropEmptyItems(value);
  if (list.trim() === '*') throw new Error("'*' is not supported here");
  return parsePortList(list);
}

export function parsePortsOrWildcard(value: string): number[] | Wildcard {
  if (value === '*') return '*';
  return parsePorts(value);
}

export function parseCidrs(value: string): Cidr[] {
  if (value === '*') throw new Error("'*' is not supported here");
  return parseCidrList(dropEmptyItems(value));
}

export function parseCidrsOrWildcard(value: string): Cidr[] | Wildcard {
  if (value === '*') return '*';
  return parseCidrList(dropEmptyItems(value));
}

/** Names checked as the plugin checks the interface annotations; empty items dropped, as `config.Split` does. */
export function parseInterfaces(value: string): string[] {
  return parseInterfaceList(dropEmptyItems(value));
}

/** Proxy UIDs/GIDs: at least one, or the proxy's own traffic would be captured and loop. */
export function parseIds(value: string): number[] {
  const ids = parseOwnerIdList(value);
  if (ids.length === 0) throw new Error('must name at least one numeric id');
  return ids;
}

export function parseGroups(value: string): string[] {
  return parseGroupList(value);
}

/** Upstream caps an include list at 64 groups: they all go into one iptables rule. */
export function parseGroupsOrWildcard(value: string): string[] | Wildcard {
  const groups = parseGroupListOrWildcard(value);
  if (groups !== '*' && groups.length > 64) throw new Error(`more than 64 groups (${groups.length})`);
  return groups;
}

/** Empty selects REDIRECT as upstream does; anything but the two modes is refused (upstream silently used REDIRECT). */
export function parseMode(value: string): InterceptionMode {
  if (value === '' || value === 'REDIRECT') return 'REDIRECT';
  if (value === 'TPROXY') return 'TPROXY';
  throw new Error('must be REDIRECT or TPROXY');
}

function parseUint32(value: string): number {
  if (!/^(0|[1-9][0-9]{0,9})$/.test(value)) throw new Error('must be a decimal integer');
  const n = Number(value);
  if (n > 0xffffffff) throw new Error('out of range 0-4294967295');
  return n;
}

export function parseMark(value: string): number {
  const mark = parseUint32(value);
  if (mark === 0) throw new Error('must not be 0 (every packet has mark 0)');
  return mark;
}

/** 253-255 are the kernel's default, main and local tables; a TPROXY default route there breaks the netns. */
export function parseRouteTable(value: string): number {
  const table = parseUint32(value);
  if (table === 0 || table === 253 || table === 254 || table === 255) {
    throw new Error('must not be 0 or a reserved table (253 default, 254 main, 255 local)');
  }
  return table;
}

/** `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR`: upstream `ValidateIPv4LoopbackCidr`. */
export function parseLoopbackCidr(value: string): Cidr {
  const cidr = parseCidr(value);
  if (cidr.family !== 4 || !cidr.isLoopback) throw new Error('must be an IPv4 loopback CIDR');
  if (cidr.prefixLength < 8) throw new Error('prefix length must be 8-32');
  return cidr;
}

export function parseIptablesBinary(value: string): 'legacy' | 'nft' {
  if (value === 'legacy' || value === 'nft') return value;
  throw new Error('must be "legacy" or "nft"');
}

const DURATION_UNITS: Readonly<Record<string, number>> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Go `time.ParseDuration` (unsigned), in milliseconds. */
export function parseDuration(value: string): number {
  if (value === '0') return 0;
  const re = /([0-9]*\.?[0-9]+|[0-9]+\.)(ns|us|µs|μs|ms|s|m|h)/y;
  let total = 0;
  let pos = 0;
  while (pos < value.length) {
    re.lastIndex = pos;
    const m = re.exec(value);
    if (m === null) throw new Error('must be a duration such as 5s, 500ms or 1m30s');
    total += Number(m[1]) * (DURATION_UNITS[m[2] ?? ''] ?? Number.NaN);
    pos = re.lastIndex;
  }
  if (value.length === 0 || !Number.isFinite(total)) throw new Error('must be a duration such as 5s, 500ms or 1m30s');
  return total;
}

const LEVELS: Readonly<Record<string, LogThreshold>> = {
  none: 'none',
  fatal: 'error',
  error: 'error',
  warn: 'warn',
  warning: 'warn',
  info: 'info',
  debug: 'debug',
};

/** Istio's `--log_output_level`: `level` or `scope:level,...`; the `default` scope (or a bare level) decides. */
export function parseLogLevel(value: string): LogThreshold {
  let threshold: LogThreshold = 'info';
  for (const item of value.split(',')) {
    const m = /^(?:([A-Za-z0-9_.-]+):)?([a-z]+)$/.exec(item);
    const level = m === null ? undefined : LEVELS[m[2] ?? ''];
    if (m === null || level === undefined) throw new Error('must be a level (none, error, warn, info, debug) or scope:level list');
    if (m[1] === undefined || m[1] === 'default') threshold = level;
  }
  return threshold;
}
