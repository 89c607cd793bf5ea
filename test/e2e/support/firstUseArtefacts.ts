/**
 * What the host's own tools create the first time they run on a machine, and nothing removes again:
 * a test run on a fresh machine creates them, a run on a machine that ran the project before does
 * not. A run puts back each one it created (absent from its `before` snapshot) once it holds nothing
 * of the run's: so the host check judges what the tests left, every run finds the host as a fresh
 * machine has it, and a first-run-only failure shows up on every run instead of only on new
 * machines. Anything still in use (an entry in /run/netns, a held lock, a process in a cgroup, a
 * running containerd) stays, and the check reports it. CONTRIBUTING.md, "Test tiers", lists them.
 */
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { cgroupHierarchies } from './cgroupHierarchies.ts';
import type { HostSnapshot } from './hostLeaks.ts';
import { runCommand } from './runCommand.ts';

/** iproute2's first `ip netns add` creates it and bind-mounts it onto itself (a shared mount point). */
export const NETNS_DIR = '/run/netns';
/** The first iptables call creates it: legacy iptables (and the wrappers that take it) flock it. */
export const XTABLES_LOCK = '/run/xtables.lock';
/** containerd's shims' socket directory (`/run/containerd/s`) is fixed, whatever containerd's state dir. */
export const CONTAINERD_RUN_DIR = '/run/containerd';
/** libcni's cache of ADD results (the container runtime's first ADD). */
export const CNI_RESULTS_DIR = '/var/lib/cni/results';
/** containerd's cgroup for the `k8s.io` namespace's containers that name no cgroup parent. */
export const CONTAINERD_CGROUP = 'k8s.io';

/** The inodes /proc/locks says are locked now. */
export function lockedInodes(procLocks: string): Set<number> {
  const inodes = new Set<number>();
  for (const line of procLocks.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:567 0 EOF" (a "->" line is a waiter on the same lock).
    const device = line.split(/\s+/).find((field) => /^[0-9a-f]+:[0-9a-f]+:\d+$/.test(field));
    if (device !== undefined) inodes.add(Number(device.split(':')[2]));
  }
  return inodes;
}

function isMountPoint(path: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[4] === path);
}

function isEmptyDir(path: string): boolean {
  try {
    return readdirSync(path).length === 0;
  } catch {
    return false;
  }
}

/** Removes a cgroup directory and its empty children, deepest first; a cgroup with processes stays. */
function removeEmptyCgroupTree(dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) removeEmptyCgroupTree(join(dir, entry.name));
  try {
    rmdirSync(dir);
  } catch {
    // still in use: the check reports the cgroup
  }
}

/**
 * Makes /run/netns what iproute2's first `ip netns add` makes it (a mount point bound onto itself,
 * shared) before a container runtime mounts pod netns in it; the rig's stop puts it back. containerd
 * only creates the directory: pod netns mounted on the plain directory are copied into the self-bind a
 * later `ip netns add` makes (a test's scratch netns), and containerd's unmount leaves the copy, so
 * every such pod's netns leaks (StopPodSandbox: `unlinkat /run/netns/cni-…: device or resource
 * busy`). Only a machine whose first `ip netns add` comes after containerd's first pod has it: a
 * fresh one, or one where the put-back above removed the mount point.
 */
export async function ensureNetnsMountPoint(): Promise<void> {
  if (isMountPoint(NETNS_DIR)) return;
  const name = `istio-cni-e2e-${process.pid}`;
  await runCommand(['ip', 'netns', 'add', name]);
  await runCommand(['ip', 'netns', 'delete', name]);
}

/**
 * Puts back what this run's first use of the host's tools created, when it is no longer in use.
 * Returns what it removed (for the log).
 */
export async function putBackFirstUseArtefacts(before: HostSnapshot): Promise<string[]> {
  const had = new Set([...before.hostPaths, ...before.cniState, ...before.mounts, ...before.cgroups]);
  const removed: string[] = [];
  if (!had.has(NETNS_DIR) && existsSync(NETNS_DIR) && isEmptyDir(NETNS_DIR)) {
    // Once per mount iproute2 stacked there (one, unless two first uses raced).
    for (let i = 0; i < 4 && isMountPoint(NETNS_DIR); i++) await runCommand(['umount', NETNS_DIR], { allowFailure: true });
    if (!isMountPoint(NETNS_DIR)) {
      rmdirSync(NETNS_DIR);
      removed.push(NETNS_DIR);
    }
  }
  if (!had.has(XTABLES_LOCK) && existsSync(XTABLES_LOCK)) {
    const inode = statSync(XTABLES_LOCK).ino;
    if (!lockedInodes(readFileSync('/proc/locks', 'utf8')).has(inode)) {
      unlinkSync(XTABLES_LOCK);
      removed.push(XTABLES_LOCK);
    }
  }
  const containerdRunning = (await runCommand(['pgrep', '-x', 'containerd'], { allowFailure: true })).exitCode === 0;
  if (!had.has(CONTAINERD_RUN_DIR) && existsSync(CONTAINERD_RUN_DIR) && !containerdRunning) {
    rmSync(CONTAINERD_RUN_DIR, { recursive: true, force: true });
    removed.push(CONTAINERD_RUN_DIR);
  }
  if (!had.has(CNI_RESULTS_DIR) && isEmptyDir(CNI_RESULTS_DIR)) {
    rmdirSync(CNI_RESULTS_DIR);
    removed.push(CNI_RESULTS_DIR);
  }
  for (const hierarchy of cgroupHierarchies()) {
    const dir = join(hierarchy, CONTAINERD_CGROUP);
    if (had.has(dir) || !existsSync(dir)) continue;
    removeEmptyCgroupTree(dir);
    if (!existsSync(dir)) removed.push(dir);
  }
  return removed;
}
