import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { RIG_BIN } from '../support/rigPaths.ts';
import { CLUSTER_DIR, STATE_FILE } from './layout.ts';

export interface ProcessRecord {
  name: string;
  pid: number;
  /** /proc/<pid>/stat start time, so `make down` never signals a recycled pid. */
  startTime: string;
  logFile: string;
  /** Stopped in ascending order: kubelets first, etcd last. */
  stopOrder: number;
}

/** What `make up` created on the host, written as it goes so `make down` undoes a half-finished `make up` too. */
export interface ClusterState {
  processes: ProcessRecord[];
  /** containerd sockets whose sandboxes are removed before their containerd stops. */
  runtimes: { socket: string; dir: string }[];
  netns: string[];
  links: string[];
  /** Host directories created as mount points (deepest last); removed when empty. */
  hostDirs: string[];
  /** cgroup names created at the top of every hierarchy (kubelet's cgroupRoot). */
  cgroups: string[];
  /** Host-wide sysctls kubelet rewrites at start (its kernel tunables), with their values before. */
  sysctls: Record<string, string>;
  /** The rig's bin dir the cluster runs from (E2E_CACHE at `make up`), for scripts/cluster/pod-exec's crictl. */
  rigBin: string;
}

export function emptyState(): ClusterState {
  return { processes: [], runtimes: [], netns: [], links: [], hostDirs: [], cgroups: [], sysctls: {}, rigBin: RIG_BIN };
}

/** The record in `file` (this checkout's by default), or undefined when there is none. */
export function loadState(file = STATE_FILE): ClusterState | undefined {
  if (!existsSync(file)) return undefined;
  return { ...emptyState(), ...(JSON.parse(readFileSync(file, 'utf8')) as Partial<ClusterState>) };
}

export function saveState(state: ClusterState): void {
  mkdirSync(CLUSTER_DIR, { recursive: true });
  writeFileSync(STATE_FILE, `${JSON.stringify(state, null, 2)}\n`);
}
