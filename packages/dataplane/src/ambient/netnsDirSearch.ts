import { addressesContainAny } from './netnsOwnership.ts';
import type { NetnsDir } from './netnsDir.ts';
import type { NetnsHandle } from './netnsHandle.ts';
import type { ScanLog } from './procScan.ts';

/** Every address configured inside a netns (production: `listNetnsAddresses`, `ip -j addr show` there). */
export type NetnsAddressLister = (netns: NetnsHandle) => Promise<string[]>;

/** The netns directory and how to read a namespace's addresses: what the procfs scans search after themselves. */
export interface NetnsDirSource {
  dir: NetnsDir;
  listAddresses: NetnsAddressLister;
}

/**
 * For each wanted key (a pod UID, or an IP) the one netns file of the directory holding one of its
 * IPs. Inodes in `skip` (the host's, and the ones the procfs scan already entered) are not opened,
 * and a namespace mounted under two names is entered once, so each namespace costs one address
 * listing whichever way it was found. Refused, with a warning: a key two namespaces match, and a
 * namespace holding the IPs of two keys (one of them is not what it seems). The caller owns the
 * returned handles; every other handle is closed here.
 */
export async function searchNetnsDir(
  source: NetnsDirSource,
  wanted: ReadonlyMap<string, readonly string[]>,
  skip: ReadonlySet<number>,
  log: ScanLog,
): Promise<Map<string, NetnsHandle>> {
  const found = new Map<string, NetnsHandle>();
  const keys = [...wanted].filter(([, ips]) => ips.length > 0);
  if (keys.length === 0) return found;
  const matches = new Map<string, NetnsHandle[]>();
  const entered = new Set<number>(skip);
  for (const entry of await source.dir.list(log)) {
    if (entered.has(entry.inode)) continue;
    let netns: NetnsHandle;
    try {
      netns = source.dir.open(entry.name);
    } catch (err) {
      log('debug', `netns dir: ${JSON.stringify(entry.name)} skipped: ${(err as Error).message}`);
      continue;
    }
    if (entered.has(netns.inode)) {
      netns.close();
      continue;
    }
    entered.add(netns.inode);
    let addresses: string[];
    try {
      addresses = await source.listAddresses(netns);
    } catch (err) {
      log('debug', `netns dir: cannot list the addresses of ${JSON.stringify(netns.source)}: ${(err as Error).message}`);
      netns.close();
      continue;
    }
    const owners = keys.filter(([, ips]) => addressesContainAny(addresses, ips)).map(([key]) => key);
    if (owners.length !== 1) {
      if (owners.length > 1) {
        log(
          'warn',
          `netns dir: ${JSON.stringify(netns.source)} holds the IPs of ${owners.length} pods (${owners.join(', ')}); refusing it`,
        );
      }
      netns.close();
      continue;
    }
    const key = owners[0] as string;
    matches.set(key, [...(matches.get(key) ?? []), netns]);
  }
  for (const [key, handles] of matches) {
    if (handles.length === 1) {
      found.set(key, handles[0] as NetnsHandle);
      continue;
    }
    log(
      'warn',
      `netns dir: ${handles.length} network namespaces hold the IPs of ${key} (${handles.map((h) => JSON.stringify(h.source)).join(', ')}); refusing them all`,
    );
    for (const h of handles) h.close();
  }
  return found;
}
