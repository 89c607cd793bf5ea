import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { killProcessesMentioning, removeCgroupTree, unmountUnder } from '../support/containerd.ts';
import { type ClaimHolder, releaseHost } from '../support/hostClaim.ts';
import { RIG_BIN } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';
import { isRunning, stopDetached } from './detached.ts';
import { CLUSTER_DIR, HOST_CLAIM_FILE } from './layout.ts';
import { type ClusterState, loadState } from './state.ts';

/**
 * Undoes what state records, in order: kubelets, every sandbox (so the primary CNI and istio-cni
 * get their DEL), the rest of the processes, leftover shims and container processes, namespaces,
 * links, cgroups, sysctls, mount points, then `.cluster/` (`clusterDir`, another checkout's when
 * `make up` removes what a killed cluster left) and the machine's claim. Returns what could not be removed.
 */
export async function tearDown(state: ClusterState, clusterDir = CLUSTER_DIR): Promise<string[]> {
  const problems: string[] = [];
  const processes = [...state.processes].sort((a, b) => a.stopOrder - b.stopOrder);
  const crictl = join(RIG_BIN, 'crictl');
  for (const p of processes.filter((p) => p.stopOrder === 0)) await stopDetached(p);
  for (const runtime of state.runtimes) {
    // A containerd that is gone (its node's holder was killed) took its sandboxes with it.
    if (!existsSync(runtime.socket) || !existsSync(crictl) || !(await socketAccepts(runtime.socket))) continue;
    const endpoint = `unix://${runtime.socket}`;
    const result = await runCommand(
      [crictl, '--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--timeout', '60s', 'rmp', '--all', '--force'],
      { allowFailure: true, timeoutMs: 180_000 },
    );
    if (result.exitCode !== 0) problems.push(`crictl rmp --all on ${runtime.socket}: ${result.stderr.trim()}`);
  }
  for (const p of processes.filter((p) => p.stopOrder > 0)) {
    try {
      await stopDetached(p);
    } catch (error) {
      problems.push(String(error));
    }
  }
  // Shims carry the containerd socket path on their command line; containers sit in the node cgroups.
  await killProcessesMentioning(clusterDir);
  for (const name of state.cgroups) killCgroupProcesses(name);
  await unmountUnder(clusterDir);
  for (const netns of state.netns) {
    const result = await runCommand(['ip', 'netns', 'delete', netns], { allowFailure: true });
    if (result.exitCode !== 0 && existsSync(`/run/netns/${netns}`)) problems.push(`netns ${netns}: ${result.stderr.trim()}`);
  }
  for (const link of state.links) {
    // A node's veth goes with its netns, asynchronously: it may vanish between the check and the delete.
    if (!existsSync(`/sys/class/net/${link}`)) continue;
    const result = await runCommand(['ip', 'link', 'delete', link], { allowFailure: true });
    if (result.exitCode !== 0 && existsSync(`/sys/class/net/${link}`)) problems.push(`link ${link}: ${result.stderr.trim()}`);
  }
  for (const name of state.cgroups) {
    await waitForEmptyCgroups(name);
    removeCgroupTree(name);
  }
  for (const [key, value] of Object.entries(state.sysctls)) {
    try {
      writeFileSync(`/proc/sys/${key}`, value);
    } catch (error) {
      problems.push(`sysctl ${key}=${value}: ${String(error)}`);
    }
  }
  for (const dir of [...state.hostDirs].reverse()) {
    try {
      rmdirSync(dir);
    } catch (error) {
      if (existsSync(dir)) problems.push(`host directory ${dir}: ${String(error)}`);
    }
  }
  for (const p of processes) if (isRunning(p)) problems.push(`${p.name} (pid ${p.pid}) still runs`);
  for (const name of state.cgroups) {
    for (const h of cgroupDirs()) if (existsSync(join(h, name))) problems.push(`cgroup ${join(h, name)} remains`);
  }
  if (problems.length === 0) {
    rmSync(clusterDir, { recursive: true, force: true });
    releaseHost(HOST_CLAIM_FILE, clusterDir);
  }
  return problems;
}

/** A cluster directory's record read as the claim needs it: this or another checkout's `.cluster/`. */
export const clusterClaimHolder: ClaimHolder = {
  liveProcess(dir) {
    const running = readRecord(dir)?.processes.find(isRunning);
    return running === undefined ? undefined : `${running.name}, pid ${running.pid}`;
  },
  async tearDown(dir) {
    const state = readRecord(dir);
    if (state !== undefined) return tearDown(state, dir);
    releaseHost(HOST_CLAIM_FILE, dir);
    return [];
  },
};

/** A cluster directory's state.json; one that does not parse is no record (its names are swept as unclaimed). */
function readRecord(dir: string): ClusterState | undefined {
  try {
    return loadState(join(dir, 'state.json'));
  } catch {
    return undefined;
  }
}

function socketAccepts(path: string): Promise<boolean> {
  return new Promise((resolveAccepts) => {
    const socket = connect(path);
    socket.once('connect', () => {
      socket.destroy();
      resolveAccepts(true);
    });
    socket.once('error', () => resolveAccepts(false));
  });
}

function cgroupDirs(): string[] {
  return readdirSync('/sys/fs/cgroup', { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => join('/sys/fs/cgroup', e.name));
}

function cgroupProcesses(dir: string): number[] {
  const pids: number[] = [];
  const walk = (d: string): void => {
    try {
      for (const pid of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) pids.push(Number(pid));
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    } catch {
      // removed meanwhile
    }
  };
  walk(dir);
  return pids;
}

/** Container processes whose shim was killed before it could stop them. */
function killCgroupProcesses(name: string): void {
  for (const h of cgroupDirs()) {
    for (const pid of cgroupProcesses(join(h, name))) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
}

async function waitForEmptyCgroups(name: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && cgroupDirs().some((h) => cgroupProcesses(join(h, name)).length > 0)) {
    await new Promise((r) => setTimeout(r, 100));
  }
}
