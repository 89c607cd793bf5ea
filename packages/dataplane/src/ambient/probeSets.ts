import { parsePodAddress } from './podAddress.ts';

/** One entry of a probe set: a pod IP and, as comment, the UID of the pod it was added for. */
export interface ProbeSetEntry {
  family: 4 | 6;
  /** Canonical text. */
  ip: string;
  /** The comment; undefined when the entry has none. */
  uid?: string;
}

export interface RemovePodResult {
  removed: string[];
  /** Entries with the pod's IP that belong to another pod (IP reuse); left alone. */
  keptForOtherPods: ProbeSetEntry[];
}

/**
 * The host probe sets `istio-inpod-probes-v4`/`-v6` (upstream `cni/pkg/ipset`): ipset or nft set, one per
 * family (IPv6 only when enabled). Adds overwrite (two event sources may add the same IP); removal
 * only touches entries whose comment is the pod's UID, so a new pod that reused the IP keeps it.
 */
export interface ProbeSetManager {
  /** Creates the sets if missing. */
  create(): Promise<void>;
  flush(): Promise<void>;
  /** Removes the sets (absent sets are fine). */
  destroy(): Promise<void>;
  list(): Promise<ProbeSetEntry[]>;
  /** Upserts each IP with the UID as comment; returns the IPs written (IPv6 is skipped while disabled). */
  addPod(uid: string, ips: readonly string[]): Promise<string[]>;
  removePod(uid: string, ips: readonly string[]): Promise<RemovePodResult>;
  /** Removes an IP whatever its comment (start-up prune). */
  removeIp(ip: string): Promise<void>;
}

/**
 * The entries for `ips` split by owner: the pod's own (comment = `uid`), which may be removed,
 * and those another pod now holds after an IP reuse, which must stay.
 */
export function entriesOfPod(
  entries: readonly ProbeSetEntry[],
  uid: string,
  ips: readonly string[],
): { own: ProbeSetEntry[]; others: ProbeSetEntry[] } {
  const wanted = new Set(ips.map((ip) => parsePodAddress(ip).address));
  const own: ProbeSetEntry[] = [];
  const others: ProbeSetEntry[] = [];
  for (const entry of entries) {
    if (!wanted.has(entry.ip)) continue;
    (entry.uid === uid ? own : others).push(entry);
  }
  return { own, others };
}
