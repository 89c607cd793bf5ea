import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goJsonKind } from './goJson.ts';
import { goList, goQuote } from './goText.ts';
import { formatCIDR, formatIP, isIPv4, parseCIDR, parseIP } from './ipAddress.ts';
import type { Result, ResultDNS, ResultIPConfig, ResultInterface, ResultRoute } from './result.ts';

/** The three result schemas of the spec and the versions each covers (as the reference library registers them). */
export const RESULT_FAMILIES = {
  '020': ['', '0.1.0', '0.2.0'],
  '040': ['0.3.0', '0.3.1', '0.4.0'],
  '100': ['1.0.0', '1.1.0'],
} as const;

export type ResultFamily = keyof typeof RESULT_FAMILIES;

/** Which schema a version's result uses, or undefined for an unknown version. */
export function resultFamily(version: string): ResultFamily | undefined {
  for (const family of Object.keys(RESULT_FAMILIES) as ResultFamily[]) {
    if ((RESULT_FAMILIES[family] as readonly string[]).includes(version)) return family;
  }
  return undefined;
}

function fail(path: string, problem: string): never {
  throw new CniError(ErrorCode.DecodingFailure, `${path}: ${problem}`);
}

type Obj = Record<string, unknown>;

function isObject(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function optObject(v: unknown, path: string): Obj | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) fail(path, `expected an object, got ${goJsonKind(v)}`);
  return v;
}

function optArray(v: unknown, path: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) fail(path, `expected an array, got ${goJsonKind(v)}`);
  return v;
}

function optString(v: unknown, path: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') fail(path, `expected a string, got ${goJsonKind(v)}`);
  return v;
}

function optInt(v: unknown, path: string, min = -2147483648): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) fail(path, `expected an integer, got ${goJsonKind(v)} ${JSON.stringify(v)}`);
  if (v < min || v > 2147483647) fail(path, `integer ${v} out of range`);
  return v;
}

function optStringList(v: unknown, path: string): string[] | undefined {
  const list = optArray(v, path);
  if (list.length === 0) return undefined;
  return list.map((item, i) => {
    if (typeof item !== 'string') fail(`${path}[${i}]`, `expected a string, got ${goJsonKind(item)}`);
    return item;
  });
}

function element(v: unknown, path: string): Obj {
  if (!isObject(v)) fail(path, `expected an object, got ${goJsonKind(v)}`);
  return v;
}

function cidr(v: unknown, path: string): { text: string; v4: boolean } {
  if (v === undefined) fail(path, 'missing');
  if (typeof v !== 'string') fail(path, `expected a CIDR string, got ${goJsonKind(v)}`);
  const parsed = parseCIDR(v);
  if (parsed === null) fail(path, `invalid CIDR address: ${v}`);
  return { text: formatCIDR(parsed), v4: isIPv4(parsed.ip) };
}

function optIP(v: unknown, path: string): string | undefined {
  const s = optString(v, path);
  if (s === undefined || s === '') return undefined;
  const ip = parseIP(s);
  if (ip === null) fail(path, `invalid IP address: ${s}`);
  return formatIP(ip);
}

function set<T extends object, K extends keyof T>(target: T, key: K, value: T[K] | undefined): void {
  if (value !== undefined) target[key] = value;
}

function parseRoute(v: unknown, path: string): ResultRoute & { v4: boolean } {
  const o = element(v, path);
  const dst = cidr(o['dst'], `${path}.dst`);
  const route: ResultRoute & { v4: boolean } = { dst: dst.text, v4: dst.v4 };
  set(route, 'gw', optIP(o['gw'], `${path}.gw`));
  const mtu = optInt(o['mtu'], `${path}.mtu`);
  if (mtu) route.mtu = mtu;
  const advmss = optInt(o['advmss'], `${path}.advmss`);
  if (advmss) route.advmss = advmss;
  const priority = optInt(o['priority'], `${path}.priority`);
  if (priority) route.priority = priority;
  set(route, 'table', optInt(o['table'], `${path}.table`));
  set(route, 'scope', optInt(o['scope'], `${path}.scope`));
  return route;
}

function stripFamily(r: ResultRoute & { v4: boolean }): ResultRoute {
  const { v4: _v4, ...route } = r;
  return route;
}

function parseDNS(v: unknown, path: string): ResultDNS {
  const o = optObject(v, path);
  const dns: ResultDNS = {};
  if (o === undefined) return dns;
  set(dns, 'nameservers', optStringList(o['nameservers'], `${path}.nameservers`));
  const domain = optString(o['domain'], `${path}.domain`);
  if (domain) dns.domain = domain;
  set(dns, 'search', optStringList(o['search'], `${path}.search`));
  set(dns, 'options', optStringList(o['options'], `${path}.options`));
  return dns;
}

function parseInterface(v: unknown, path: string, family: ResultFamily): ResultInterface {
  const o = element(v, path);
  const intf: ResultInterface = { name: optString(o['name'], `${path}.name`) ?? '' };
  const mac = optString(o['mac'], `${path}.mac`);
  if (mac) intf.mac = mac;
  if (family === '100') {
    const mtu = optInt(o['mtu'], `${path}.mtu`);
    if (mtu) intf.mtu = mtu;
  }
  const sandbox = optString(o['sandbox'], `${path}.sandbox`);
  if (sandbox) intf.sandbox = sandbox;
  if (family === '100') {
    const socketPath = optString(o['socketPath'], `${path}.socketPath`);
    if (socketPath) intf.socketPath = socketPath;
    const pciID = optString(o['pciID'], `${path}.pciID`);
    if (pciID) intf.pciID = pciID;
  }
  return intf;
}

function parseIPConfig(v: unknown, path: string, family: ResultFamily): ResultIPConfig {
  const o = element(v, path);
  const address = cidr(o['address'], `${path}.address`);
  if (family === '040') {
    const version = optString(o['version'], `${path}.version`);
    if (version !== undefined && version !== '4' && version !== '6') {
      fail(`${path}.version`, `must be "4" or "6", got ${goQuote(version)}`);
    }
    if (version !== undefined && (version === '4') !== address.v4) {
      fail(`${path}.version`, `${goQuote(version)} does not match address ${address.text}`);
    }
  }
  const ipc: ResultIPConfig = { address: address.text };
  set(ipc, 'interface', optInt(o['interface'], `${path}.interface`, 0));
  set(ipc, 'gateway', optIP(o['gateway'], `${path}.gateway`));
  const ordered: ResultIPConfig = {} as ResultIPConfig;
  set(ordered, 'interface', ipc.interface);
  ordered.address = ipc.address;
  set(ordered, 'gateway', ipc.gateway);
  return ordered;
}

function parseLegacyIP(v: unknown, path: string, v4: boolean, result: Result): void {
  const o = optObject(v, path);
  if (o === undefined) return;
  const ip = cidr(o['ip'], `${path}.ip`);
  if (ip.v4 !== v4) fail(`${path}.ip`, `${ip.text} is not an IPv${v4 ? 4 : 6} address`);
  const ipc: ResultIPConfig = { address: ip.text };
  set(ipc, 'gateway', optIP(o['gateway'], `${path}.gateway`));
  result.ips.push(ipc);
  optArray(o['routes'], `${path}.routes`).forEach((r, i) => {
    const route = parseRoute(r, `${path}.routes[${i}]`);
    if (route.v4 !== v4) fail(`${path}.routes[${i}].dst`, `${route.dst} is not an IPv${v4 ? 4 : 6} route`);
    result.routes.push(stripFamily(route));
  });
}

/**
 * Reads a result of any supported version into the canonical form.
 * `version` selects the schema (like the reference library's `version.NewResult(version, bytes)`)
 * and defaults to the result's own `cniVersion`; the result's `cniVersion` must belong to
 * that schema's versions. Throws a CniError (code 6) naming the offending field.
 */
export function parseResult(json: unknown, version?: string): Result {
  if (!isObject(json)) fail('result', `expected an object, got ${goJsonKind(json)}`);
  const own = optString(json['cniVersion'], 'cniVersion') ?? '';
  const wanted = version ?? own;
  const family = resultFamily(wanted);
  if (family === undefined) {
    throw new CniError(ErrorCode.DecodingFailure, `unsupported CNI result version ${goQuote(wanted)}`);
  }
  const versions = RESULT_FAMILIES[family] as readonly string[];
  if (!versions.includes(own)) {
    throw new CniError(
      ErrorCode.DecodingFailure,
      `result type supports ${goList(versions)} but unmarshalled CNIVersion is ${goQuote(own)}`,
    );
  }
  const result: Result = {
    cniVersion: own === '' ? '0.2.0' : own,
    interfaces: [],
    ips: [],
    routes: [],
    dns: parseDNS(json['dns'], 'dns'),
  };
  if (family === '020') {
    parseLegacyIP(json['ip4'], 'ip4', true, result);
    parseLegacyIP(json['ip6'], 'ip6', false, result);
    return result;
  }
  result.interfaces = optArray(json['interfaces'], 'interfaces').map((v, i) => parseInterface(v, `interfaces[${i}]`, family));
  result.ips = optArray(json['ips'], 'ips').map((v, i) => parseIPConfig(v, `ips[${i}]`, family));
  result.routes = optArray(json['routes'], 'routes').map((v, i) => stripFamily(parseRoute(v, `routes[${i}]`)));
  return result;
}
