import type { CommandRunner } from '../commandRunner.ts';
import { parseIpAddrJson } from '../detectPodIpv6.ts';
import type { NetnsHandle } from './netnsHandle.ts';
import { parsePodAddress } from './podAddress.ts';
import type { NetnsOwnershipCheck } from './podNetnsProcFinder.ts';

/**
 * True when one of the interface addresses equals one of the pod IPs (compared canonically,
 * IPv4-mapped IPv6 as IPv4). Unparseable interface addresses are ignored; a bad pod IP throws.
 */
export function addressesContainAny(interfaceAddresses: readonly string[], podIps: readonly string[]): boolean {
  const wanted = new Set(podIps.map((ip) => parsePodAddress(ip).address));
  for (const text of interfaceAddresses) {
    let address: string;
    try {
      address = parsePodAddress(text).address;
    } catch {
      continue;
    }
    if (wanted.has(address)) return true;
  }
  return false;
}

/** Every address configured inside the netns (`ip -j addr show`, run there). */
export async function listNetnsAddresses(runner: CommandRunner, netns: NetnsHandle, options: { ip?: string } = {}): Promise<string[]> {
  return netns.use(async (path) => {
    const { stdout } = await runner.run([options.ip ?? 'ip', '-j', 'addr', 'show'], { netns: path });
    return parseIpAddrJson(stdout).map((a) => a.address);
  });
}

/** The production ownership check: enter the netns and look for one of the pod's IPs. */
export function createNetnsOwnershipCheck(runner: CommandRunner, options: { ip?: string } = {}): NetnsOwnershipCheck {
  return async (netns, podIps) => addressesContainAny(await listNetnsAddresses(runner, netns, options), podIps);
}
