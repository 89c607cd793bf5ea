import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { isIPv4, parseCIDR } from './ipAddress.ts';
import { resultFamily } from './parseResult.ts';
import type { Result, ResultIPConfig, ResultInterface, ResultRoute } from './result.ts';
import { LATEST_VERSION } from './versions.ts';

type Json = Record<string, unknown>;

function isV4Cidr(cidr: string): boolean {
  const parsed = parseCIDR(cidr);
  return parsed !== null && isIPv4(parsed.ip);
}

function pick<T extends object>(from: T, keys: readonly (keyof T)[]): Json {
  const out: Json = {};
  for (const k of keys) if (from[k] !== undefined) out[k as string] = from[k];
  return out;
}

const ROUTE_KEYS = ['dst', 'gw', 'mtu', 'advmss', 'priority', 'table', 'scope'] as const;
const DNS_KEYS = ['nameservers', 'domain', 'search', 'options'] as const;

function dnsJson(result: Result): Json {
  const out = pick(result.dns, DNS_KEYS);
  for (const k of ['nameservers', 'search', 'options'] as const) {
    const list = result.dns[k];
    if (list !== undefined && list.length === 0) delete out[k];
  }
  if (out['domain'] === '') delete out['domain'];
  return out;
}

function withLists(base: Json, lists: [string, unknown[]][], dns: Json): Json {
  for (const [key, list] of lists) if (list.length > 0) base[key] = list;
  base['dns'] = dns;
  return base;
}

function encode100(result: Result, version: string): Json {
  const interfaces = result.interfaces.map((i) => pick<ResultInterface>(i, ['name', 'mac', 'mtu', 'sandbox', 'socketPath', 'pciID']));
  const ips = result.ips.map((ip) => pick<ResultIPConfig>(ip, ['interface', 'address', 'gateway']));
  const routes = result.routes.map((r) => pick<ResultRoute>(r, ROUTE_KEYS));
  return withLists(
    { cniVersion: version },
    [
      ['interfaces', interfaces],
      ['ips', ips],
      ['routes', routes],
    ],
    dnsJson(result),
  );
}

function encode040(result: Result, version: string): Json {
  const interfaces = result.interfaces.map((i) => pick<ResultInterface>(i, ['name', 'mac', 'sandbox']));
  const ips = result.ips.map((ip) => ({
    version: isV4Cidr(ip.address) ? '4' : '6',
    ...pick<ResultIPConfig>(ip, ['interface', 'address', 'gateway']),
  }));
  const routes = result.routes.map((r) => pick<ResultRoute>(r, ROUTE_KEYS));
  return withLists(
    { cniVersion: version },
    [
      ['interfaces', interfaces],
      ['ips', ips],
      ['routes', routes],
    ],
    dnsJson(result),
  );
}

function encode020(result: Result, version: string, fromLegacy: boolean): Json {
  // Like the reference converter: only the first address of each family survives,
  // and routes follow their destination's family when that family has an address.
  const first4 = result.ips.find((ip) => isV4Cidr(ip.address));
  const first6 = result.ips.find((ip) => !isV4Cidr(ip.address));
  if (!fromLegacy && first4 === undefined && first6 === undefined) {
    throw new CniError(ErrorCode.Internal, 'cannot convert: no valid IP addresses');
  }
  const legacy = (ip: ResultIPConfig | undefined, v4: boolean): Json | undefined => {
    if (ip === undefined) return undefined;
    const out: Json = { ip: ip.address };
    if (ip.gateway !== undefined) out['gateway'] = ip.gateway;
    const routes = result.routes
      .filter((r) => isV4Cidr(r.dst) === v4)
      .map((r) => (fromLegacy ? pick<ResultRoute>(r, ROUTE_KEYS) : pick<ResultRoute>(r, ['dst', 'gw'])));
    if (routes.length > 0) out['routes'] = routes;
    return out;
  };
  const out: Json = { cniVersion: version };
  const ip4 = legacy(first4, true);
  const ip6 = legacy(first6, false);
  if (ip4 !== undefined) out['ip4'] = ip4;
  if (ip6 !== undefined) out['ip6'] = ip6;
  out['dns'] = dnsJson(result);
  return out;
}

/**
 * Writes a result as the JSON object of spec version `version`, shaped like
 * the reference library marshals it (empty lists and fields left out, `dns`
 * always present). Throws a CniError (code 999, the reference library's text)
 * when the version is unknown or the result cannot be expressed in it.
 */
export function encodeResult(result: Result, version: string): Record<string, unknown> {
  const from = resultFamily(result.cniVersion);
  const to = resultFamily(version);
  if (from === undefined || to === undefined || version === '') {
    throw new CniError(ErrorCode.Internal, `no converter for CNI result version ${result.cniVersion} to ${version}`);
  }
  if (to === '100') return encode100(result, version);
  if (to === '040') return encode040(result, version);
  return encode020(result, version, from === '020');
}

/**
 * A result with nothing in it, as `version` (what a chained plugin prints without prevResult).
 * Go's converter refuses an address-less 0.1.0/0.2.0 result ("no valid IP addresses"); a plugin
 * that only adds rules has no addresses to report, so for those versions this is `{cniVersion, dns}`.
 */
export function emptyResult(version: string): Record<string, unknown> {
  if (version === '0.1.0' || version === '0.2.0') return { cniVersion: version, dns: {} };
  return encodeResult({ cniVersion: LATEST_VERSION, interfaces: [], ips: [], routes: [], dns: {} }, version);
}
