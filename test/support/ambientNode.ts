/**
 * A scratch "node" for ambient tests: a node netns (where the daemon, its host rules and probe
 * sets live) and pod sandboxes joined to it by veth pairs, each with a "pause" process in the pod
 * netns whose cgroup path carries the pod UID the way the kubelet's cgroupfs driver writes it
 * (`…/kubepods/besteffort/pod<uid>/<container id>`), so the agent's procfs scan can find it.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeObject } from './fakeKubeApi.ts';
import { TEST_NODE } from './meshPods.ts';
import type { DirNetns, ScratchNetnsDir } from './netnsDir.ts';

export interface NetnsRef {
  name: string;
  path: string;
}

export interface PodSandbox {
  uid: string;
  namespace: string;
  name: string;
  netns: NetnsRef;
  ip: string;
  /** The node's address on this pod's veth (the pod's default gateway). */
  gateway: string;
  /** The node side of the pod's veth (in the node netns). */
  hostVeth: string;
  containerId: string;
  /** The pause process: lives in the pod netns and the pod's cgroup (none with `pause: false` or `netnsDir`). */
  pause: ChildProcess;
  inode: number;
  /** Starts another process of the pod (an app container) in its netns and cgroup. */
  startProcess(): Promise<ChildProcess>;
  /** Kills the pod's processes, removes its cgroup and the netns (idempotent). */
  remove(): Promise<void>;
}

export interface AmbientNode {
  netns: NetnsRef;
  /**
   * Creates a pod sandbox with IP 10.<a>.<b>.2 (node side .1) for index 0..16383. `netnsDir`: the pod netns is a file of that directory with no process in it (CRI-O with
   * `drop_infra_ctr`), and no pause process is started.
   */
  addPod(
    namespace: string,
    name: string,
    index: number,
    options?: { uid?: string; pause?: boolean; netnsDir?: ScratchNetnsDir },
  ): Promise<PodSandbox>;
  /**
   * The runtime re-creating a pod's sandbox under the same UID, with no CNI call: a new netns (the
   * old pod IP, or that of pod index `index`) and a new pause process in the pod's cgroup; the old
   * sandbox's processes are killed and its netns deleted (still alive while someone holds it open)
   * unless `keepOld`. The new netns's veth has no node-side address (the old one may still hold it).
   */
  replaceSandbox(old: PodSandbox, options?: { index?: number; keepOld?: boolean }): Promise<PodSandbox>;
  /** A non-enrolled netns routed through the node (10.95.0.2): traffic from it is forwarded, not local. */
  addPeer(): NetnsRef;
  remove(): Promise<void>;
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

function ipBatch(netns: string, lines: string[]): void {
  execFileSync('ip', ['-n', netns, '-batch', '-'], { input: [...lines, ''].join('\n'), stdio: ['pipe', 'ignore', 'pipe'] });
}

function deleteNetns(name: string): void {
  try {
    execFileSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
  } catch {
    // already gone
  }
}

/** A cgroup hierarchy we may create directories in: cgroup v1 `pids`, else the v2 root. */
function cgroupRoot(): string {
  if (existsSync('/sys/fs/cgroup/pids/cgroup.procs')) return '/sys/fs/cgroup/pids';
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return '/sys/fs/cgroup';
  if (existsSync('/sys/fs/cgroup/unified/cgroup.procs')) return '/sys/fs/cgroup/unified';
  throw new Error('no writable cgroup hierarchy found under /sys/fs/cgroup');
}

function removeCgroupTree(dir: string): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
  try {
    rmdirSync(dir);
  } catch {
    // a process is still in it; it is reaped below
  }
}

async function waitForNetns(pid: number, inode: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    try {
      if (statSync(`/proc/${pid}/ns/net`).ino === inode) return;
    } catch {
      // not yet exec'd
    }
    await sleep(5);
  }
  throw new Error(`process ${pid} never entered netns inode ${inode}`);
}

export function createAmbientNode(): AmbientNode {
  const id = randomBytes(3).toString('hex');
  const netns = { name: `ambnode-${id}`, path: `/var/run/netns/ambnode-${id}` };
  const created: string[] = [];
  const sandboxes = new Set<PodSandbox>();
  const cgroupTop = join(cgroupRoot(), `istio-cni-test-${id}`);
  ip('netns', 'add', netns.name);
  created.push(netns.name);
  ipBatch(netns.name, ['link set lo up']);
  execFileSync('ip', ['netns', 'exec', netns.name, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'], { stdio: 'ignore' });

  /** `vn` names the node side of the veth (≤ 15 characters, unique on the node). */
  const attach = (
    name: string,
    vn: string,
    nodeIp: string | undefined,
    podIp: string,
    prefix: number,
    dir?: ScratchNetnsDir,
  ): NetnsRef | DirNetns => {
    let ref: NetnsRef | DirNetns;
    if (dir === undefined) {
      ref = { name, path: `/var/run/netns/${name}` };
      ip('netns', 'add', name);
      created.push(name);
    } else {
      ref = dir.add(name);
    }
    const pod = (args: string[], input?: string) =>
      execFileSync('nsenter', [`--net=${ref.path}`, 'ip', ...args], { stdio: [input ? 'pipe' : 'ignore', 'ignore', 'pipe'], input });
    pod(['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', vn, 'netns', netns.name]);
    ipBatch(netns.name, [...(nodeIp === undefined ? [] : [`addr add ${nodeIp}/${prefix} dev ${vn}`]), `link set ${vn} up`]);
    const route = nodeIp === undefined ? 'route add default dev eth0' : `route add default via ${nodeIp}`;
    pod(['-batch', '-'], ['link set lo up', `addr add ${podIp}/${prefix} dev eth0`, 'link set eth0 up', route, ''].join('\n'));
    return ref;
  };
  const podSubnet = (index: number): string => {
    if (index < 0 || index > 16383) throw new Error(`pod index ${index} out of range 0..16383`);
    return `10.${100 + (index >> 8)}.${index & 0xff}`;
  };

  /** A sandbox of pod `uid` in `ref`, with its pause process (in the netns and a container cgroup of the pod) when `withPause`. */
  const sandboxIn = async (
    pod: { uid: string; namespace: string; name: string; ip: string; gateway: string; hostVeth: string },
    ref: NetnsRef | DirNetns,
    withPause: boolean,
  ): Promise<PodSandbox> => {
    const { uid } = pod;
    const containerId = randomBytes(32).toString('hex');
    const inode = statSync(ref.path).ino;
    const processes: ChildProcess[] = [];
    /** A process of the pod: in its netns, and in a container cgroup of the pod as the kubelet's cgroupfs driver names it. */
    const startProcess = async (): Promise<ChildProcess> => {
      const cgroupDir = join(
        cgroupTop,
        'kubepods',
        'besteffort',
        `pod${uid}`,
        processes.length === 0 ? containerId : randomBytes(32).toString('hex'),
      );
      mkdirSync(cgroupDir, { recursive: true });
      const child = spawn('nsenter', [`--net=${ref.path}`, '--', 'sleep', '86400'], { stdio: 'ignore' });
      const pid = child.pid;
      if (pid === undefined) throw new Error('could not start a pod process');
      processes.push(child);
      writeFileSync(join(cgroupDir, 'cgroup.procs'), String(pid));
      await waitForNetns(pid, inode);
      return child;
    };
    const pause = withPause ? await startProcess() : undefined;
    const killProcesses = async () => {
      for (const p of processes) {
        if (p.exitCode !== null || p.signalCode !== null) continue;
        const exited = new Promise((r) => p.once('exit', r));
        p.kill('SIGKILL');
        await exited;
      }
    };
    const sandbox: PodSandbox & { killProcesses(): Promise<void> } = {
      ...pod,
      netns: ref,
      containerId,
      pause: pause as ChildProcess,
      inode,
      startProcess,
      killProcesses,
      async remove() {
        sandboxes.delete(sandbox);
        await killProcesses();
        // The pod's cgroup goes with its last sandbox.
        if (![...sandboxes].some((s) => s.uid === uid)) removeCgroupTree(join(cgroupTop, 'kubepods', 'besteffort', `pod${uid}`));
        if ('remove' in ref && typeof ref.remove === 'function') ref.remove();
        else deleteNetns(ref.name);
      },
    };
    sandboxes.add(sandbox);
    return sandbox;
  };
  let replacements = 0;

  return {
    netns,
    async addPod(namespace, name, index, options = {}) {
      const subnet = podSubnet(index);
      const hostVeth = `v${id}${index}`;
      const dir = options.netnsDir;
      const ref = attach(dir === undefined ? `ambpod-${id}-${index}` : randomUUID(), hostVeth, `${subnet}.1`, `${subnet}.2`, 24, dir);
      const pod = { uid: options.uid ?? randomUUID(), namespace, name, ip: `${subnet}.2`, gateway: `${subnet}.1`, hostVeth };
      return sandboxIn(pod, ref, options.pause !== false && dir === undefined);
    },
    async replaceSandbox(old, options = {}) {
      const n = ++replacements;
      const podIp = options.index === undefined ? old.ip : `${podSubnet(options.index)}.2`;
      const hostVeth = `v${id}r${n}`;
      const ref = attach(`ambpod-${id}-r${n}`, hostVeth, undefined, podIp, 24);
      sandboxes.delete(old);
      await (old as PodSandbox & { killProcesses?(): Promise<void> }).killProcesses?.();
      if (!options.keepOld) deleteNetns(old.netns.name);
      else sandboxes.add(old);
      return sandboxIn({ uid: old.uid, namespace: old.namespace, name: old.name, ip: podIp, gateway: old.gateway, hostVeth }, ref, true);
    },
    addPeer() {
      return attach(`ambpeer-${id}`, `v${id}p`, '10.95.0.1', '10.95.0.2', 24);
    },
    async remove() {
      for (const s of [...sandboxes]) await s.remove();
      removeCgroupTree(cgroupTop);
      for (const name of created.reverse()) deleteNetns(name);
    },
  };
}

/** An ambient pod as the API serves it once running (IPs in the status; not labelled itself). */
export function ambientPodObject(
  sandbox: Pick<PodSandbox, 'uid' | 'namespace' | 'name' | 'ip'>,
  labels: Record<string, string> = {},
): KubeObject {
  return {
    metadata: { name: sandbox.name, namespace: sandbox.namespace, uid: sandbox.uid, labels: { app: sandbox.name, ...labels } },
    spec: {
      nodeName: TEST_NODE,
      restartPolicy: 'Always',
      serviceAccountName: `sa-${sandbox.name}`,
      containers: [{ name: 'app', image: 'docker.io/library/nginx:1.27', ports: [{ containerPort: 8080, protocol: 'TCP' }] }],
    },
    status: { phase: 'Running', podIP: sandbox.ip, podIPs: [{ ip: sandbox.ip }], qosClass: 'BestEffort' },
  };
}
