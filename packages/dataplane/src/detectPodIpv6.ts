import { type Pod, redirectFromPod } from '@istio-cni/capture';
import type { CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';

export interface InterfaceAddress {
  ifname: string;
  family: 'inet' | 'inet6';
  address: string;
  scope: string;
}

/** Addresses in `ip -j addr show` order. */
export function parseIpAddrJson(json: string): InterfaceAddress[] {
  const parsed: unknown = JSON.parse(json);
  if (!Array.isArray(parsed)) throw new Error(`ip -j addr output is not an array: ${json.slice(0, 80)}`);
  const out: InterfaceAddress[] = [];
  for (const link of parsed as { ifname?: unknown; addr_info?: unknown }[]) {
    const ifname = typeof link.ifname === 'string' ? link.ifname : '';
    const infos = Array.isArray(link.addr_info) ? (link.addr_info as Record<string, unknown>[]) : [];
    for (const info of infos) {
      if ((info.family !== 'inet' && info.family !== 'inet6') || typeof info.local !== 'string') continue;
      out.push({ ifname, family: info.family, address: info.local, scope: typeof info.scope === 'string' ? info.scope : '' });
    }
  }
  return out;
}

function usable(a: InterfaceAddress): boolean {
  if (a.ifname === 'lo' || a.scope === 'host' || a.scope === 'link') return false;
  if (a.family === 'inet') return !a.address.startsWith('127.') && !a.address.startsWith('169.254.');
  const lower = a.address.toLowerCase();
  return lower !== '::1' && !/^fe[89ab]/.test(lower);
}

/**
 * As upstream `tools/common/config`: the first non-loopback, non-link-local address decides whether IPv6 rules are needed;
 * with dual stack any such IPv6 address enables them. No usable address at all is an error, as a
 * pod without one cannot be captured meaningfully.
 */
export function ipv6Enabled(addresses: readonly InterfaceAddress[], dualStack: boolean): boolean {
  const candidates = addresses.filter(usable);
  const first = candidates[0];
  if (first === undefined) {
    throw new DataplaneError('ERR_DATAPLANE_NO_POD_ADDRESS', 'no non-loopback, non-link-local address found');
  }
  if (first.family === 'inet6') return true;
  return dualStack && candidates.some((a) => a.family === 'inet6');
}

export async function detectPodIpv6(
  runner: CommandRunner,
  netns: string,
  options: { dualStack?: boolean; ip?: string } = {},
): Promise<boolean> {
  const { stdout } = await runner.run([options.ip ?? 'ip', '-j', 'addr', 'show'], { netns });
  try {
    return ipv6Enabled(parseIpAddrJson(stdout), options.dualStack === true);
  } catch (err) {
    const code = err instanceof DataplaneError ? err.code : 'ERR_DATAPLANE_NO_POD_ADDRESS';
    throw new DataplaneError(code, `failed to detect the IP family of netns ${JSON.stringify(netns)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/**
 * The pod's global IPv6 addresses (`address/prefix` or bare, as the CNI result or the hand-off
 * request carries them) that its sidecar capture leaves out: IPv4 comes first and ISTIO_DUAL_STACK
 * is off, so only IPv4 rules are written (upstream's choice, kept) and IPv6 traffic bypasses the
 * proxy. Empty when capture covers every family the pod has.
 */
export function uncapturedIpv6(ips: readonly string[], dualStack: boolean): string[] {
  const usableAddresses = resultAddresses(ips).filter(usable);
  if (usableAddresses.length === 0 || ipv6Enabled(usableAddresses, dualStack)) return [];
  return usableAddresses.filter((a) => a.family === 'inet6').map((a) => a.address);
}

/**
 * The warning a sidecar pod's ADD logs when its capture leaves IPv6 addresses out (see
 * `uncapturedIpv6`): the operator's one sign of a bypass nothing else fails on.
 */
export function uncapturedIpv6Warning(pod: Pod, ips: readonly string[]): { msg: string; ipv6: string[] } | undefined {
  const ipv6 = uncapturedIpv6(ips, redirectFromPod(pod).dualStack);
  if (ipv6.length === 0) return undefined;
  return {
    msg: "the pod's IPv6 traffic is not captured: its first address is IPv4 and ISTIO_DUAL_STACK is not set on istio-proxy (set it for dual-stack pods)",
    ipv6,
  };
}

/**
 * The same decision from the primary network's CNI result (`prevResult.ips`, `address/prefix`),
 * which lists the pod's own interface addresses: saves entering the netns on the ADD path.
 * `undefined` when the result has no address (the caller then inspects the netns).
 */
export function ipv6EnabledFromResultIps(cidrs: readonly string[], dualStack: boolean): boolean | undefined {
  const addresses = resultAddresses(cidrs);
  return addresses.some(usable) ? ipv6Enabled(addresses, dualStack) : undefined;
}

function resultAddresses(ips: readonly string[]): InterfaceAddress[] {
  return ips.map((ip) => {
    const address = ip.split('/')[0] ?? '';
    return { ifname: 'eth0', family: address.includes(':') ? 'inet6' : 'inet', address, scope: 'global' };
  });
}
