import type { NetnsHandle } from './netnsHandle.ts';

/** What ztunnel is told about a workload (ZDS `WorkloadInfo`). */
export interface WorkloadInfo {
  name: string;
  namespace: string;
  serviceAccount: string;
}

/** One cached pod as the ZDS server sends it: `Add` with the fd when `netns` is known, else `Keep`. */
export interface PodSnapshotEntry {
  uid: string;
  workload: WorkloadInfo;
  netns?: NetnsHandle;
}

/**
 * Node-local ambient pods by UID with their open netns (upstream `pod_cache.go`). The cache owns the handles it
 * holds: replaced or removed handles are closed here. `take` is the exception: it hands the
 * handle to the caller, who closes it when done (e.g. after deleting the in-pod rules).
 * Handles given out by `get`/`snapshot` stay owned by the cache; use them through
 * `NetnsHandle.use`, which keeps the fd open across a concurrent close.
 */
export interface PodNetnsCache {
  /** Adds a placeholder without netns if the pod is unknown (a snapshot then sends `Keep`). */
  ensure(uid: string, workload: WorkloadInfo): void;
  /**
   * Stores `netns` for the pod and returns the handle now cached: if the cached one has the same
   * inode it is kept and `netns` is closed; otherwise `netns` replaces it and the old is closed.
   */
  upsert(uid: string, workload: WorkloadInfo, netns: NetnsHandle): NetnsHandle;
  get(uid: string): NetnsHandle | undefined;
  has(uid: string): boolean;
  /** Removes the pod and returns its handle (caller closes it); undefined if absent or no netns. */
  take(uid: string): NetnsHandle | undefined;
  /** Removes the pod and closes its handle. */
  remove(uid: string): void;
  /** A copy of the current entries, in insertion order. */
  snapshot(): PodSnapshotEntry[];
  readonly size: number;
  /** Closes every handle and empties the cache (agent shutdown). */
  closeAll(): void;
}

export function createPodNetnsCache(): PodNetnsCache {
  const entries = new Map<string, PodSnapshotEntry>();
  return {
    ensure(uid, workload) {
      const existing = entries.get(uid);
      if (existing === undefined) entries.set(uid, { uid, workload: { ...workload } });
    },
    upsert(uid, workload, netns) {
      const existing = entries.get(uid);
      const old = existing?.netns;
      if (old !== undefined && !old.closed && old.inode === netns.inode) {
        if (old !== netns) netns.close();
        entries.set(uid, { uid, workload: { ...workload }, netns: old });
        return old;
      }
      entries.set(uid, { uid, workload: { ...workload }, netns });
      if (old !== undefined && old !== netns) old.close();
      return netns;
    },
    get: (uid) => entries.get(uid)?.netns,
    has: (uid) => entries.has(uid),
    take(uid) {
      const existing = entries.get(uid);
      entries.delete(uid);
      return existing?.netns;
    },
    remove(uid) {
      const existing = entries.get(uid);
      entries.delete(uid);
      existing?.netns?.close();
    },
    snapshot: () => [...entries.values()].map((e) => ({ ...e, workload: { ...e.workload } })),
    get size() {
      return entries.size;
    },
    closeAll() {
      for (const e of entries.values()) e.netns?.close();
      entries.clear();
    },
  };
}
