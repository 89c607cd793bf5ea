/** What ztunnel is told about a pod (`WorkloadInfo`): the pod's name, namespace and service account. */
export interface WorkloadInfo {
  name: string;
  namespace: string;
  serviceAccount: string;
}

/** One cached pod: its workload and, when known, an open fd of its network namespace. */
export interface PodSnapshotEntry {
  workload?: WorkloadInfo;
  /** Omitted when the netns could not be found: the snapshot then sends `Keep` instead of `Add`. */
  netnsFd?: number;
}

/**
 * The pod netns cache as the ZDS server sees it (upstream `pod_cache.go` `ReadCurrentPodSnapshot`). The server
 * duplicates every fd in the same tick it reads the snapshot, so the cache may close its fds at any
 * later time without racing a snapshot in flight.
 */
export interface PodSnapshotSource {
  readCurrentPodSnapshot(): ReadonlyMap<string, PodSnapshotEntry>;
}

/** Structured logger shape the server writes to (compatible with `@istio-cni/handoff`'s Logger). */
export interface ZdsLogger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export const silentZdsLogger: ZdsLogger = { debug() {}, info() {}, warn() {}, error() {} };
