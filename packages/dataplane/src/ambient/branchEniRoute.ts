import { parseInterfaceName } from '@istio-cni/capture';
import { parseIpAddress } from '@istio-cni/cni';
import type { PodAddress } from './podAddress.ts';

/**
 * How aws-vpc-cni routes a branch ENI pod (Security Groups for Pods), as upstream `brancheni_linux.go`
 * `branchENIRoute`: the routing table holding the host route to the pod, the host-side veth that
 * route leaves by, and the priority of aws-vpc-cni's `iif <veth> lookup <table>` rule.
 */
export interface BranchEniRoute {
  table: number;
  veth: string;
  iifPriority: number;
}

/** An `iif <name> lookup <table>` rule of `ip -N -j rule show`. */
export interface IifRule {
  iif: string;
  table: number;
  priority: number;
}

/** A full-length route (`/32`, `/128`) of `ip -N -j route show table <n>` and its output device. */
export interface HostRoute {
  family: 4 | 6;
  /** Canonical text. */
  address: string;
  dev: string;
}

/** `ip` prints these tables by name even with -N on some versions; any other name has no known number. */
const TABLE_NAMES: Readonly<Record<string, number>> = { unspec: 0, default: 253, main: 254, local: 255 };
const MAIN_TABLE = 254;
const LOCAL_TABLE = 255;

function parseTable(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isSafeInteger(value)) return value;
  if (typeof value !== 'string') return undefined;
  if (/^(0|[1-9][0-9]{0,9})$/.test(value)) return Number(value);
  return TABLE_NAMES[value];
}

function interfaceName(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  try {
    return parseInterfaceName(value);
  } catch {
    return undefined;
  }
}

function jsonArray(text: string, what: string): unknown[] {
  const parsed: unknown = JSON.parse(text.trim() === '' ? '[]' : text);
  if (!Array.isArray(parsed)) throw new Error(`${what}: expected a JSON array`);
  return parsed;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/**
 * The rules with an input interface and a lookup table. An interface name that is not a plain
 * Linux name is dropped: it would end up in an `ip rule` argv.
 */
export function parseIifRules(json: string): IifRule[] {
  const rules: IifRule[] = [];
  for (const entry of jsonArray(json, 'ip rule show')) {
    if (!isObject(entry)) continue;
    const iif = interfaceName(entry.iif);
    const table = parseTable(entry.table);
    const priority = entry.priority;
    if (iif === undefined || table === undefined || typeof priority !== 'number' || !Number.isSafeInteger(priority)) continue;
    rules.push({ iif, table, priority });
  }
  return rules;
}

/** Host routes with a single output device; `ip` omits the prefix length of a full-length destination. */
export function parseHostRoutes(json: string): HostRoute[] {
  const routes: HostRoute[] = [];
  for (const entry of jsonArray(json, 'ip route show')) {
    if (!isObject(entry) || typeof entry.dst !== 'string') continue;
    const dev = interfaceName(entry.dev);
    if (dev === undefined) continue;
    const [text = '', prefix, ...rest] = entry.dst.split('/');
    if (rest.length > 0) continue;
    let family: 4 | 6;
    let address: string;
    try {
      ({ family, address } = parseIpAddress(text));
    } catch {
      continue;
    }
    if (prefix !== undefined && prefix !== (family === 4 ? '32' : '128')) continue;
    routes.push({ family, address, dev });
  }
  return routes;
}

/**
 * The iif rules grouped by table, ascending, leaving out main and local (and table 0): aws-vpc-cni
 * gives only branch ENI pods iif rules, each into the pod's own table; a regular pod has a
 * destination rule into main.
 */
export function iifRulesByTable(rules: readonly IifRule[]): Map<number, IifRule[]> {
  const byTable = new Map<number, IifRule[]>();
  for (const rule of rules) {
    if (rule.table <= 0 || rule.table === MAIN_TABLE || rule.table === LOCAL_TABLE) continue;
    byTable.set(rule.table, [...(byTable.get(rule.table) ?? []), rule]);
  }
  return new Map([...byTable].sort(([a], [b]) => a - b));
}

/**
 * The branch ENI route of `pod` in `table`: a host route to the pod whose device is also the input
 * interface of one of the table's iif rules (aws-vpc-cni also has one for the VLAN link, whose
 * device carries no route to the pod).
 */
export function matchBranchEniRoute(
  pod: PodAddress,
  table: number,
  iifRules: readonly IifRule[],
  routes: readonly HostRoute[],
): BranchEniRoute | undefined {
  for (const route of routes) {
    if (route.family !== pod.family || route.address !== pod.address) continue;
    const rule = iifRules.find((r) => r.iif === route.dev);
    if (rule !== undefined) return { table, veth: route.dev, iifPriority: rule.priority };
  }
  return undefined;
}
