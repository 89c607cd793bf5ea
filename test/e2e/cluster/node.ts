import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { cgroupHierarchies } from '../support/cgroupHierarchies.ts';
import { containerdArgv, ctrArgv, renderContainerdConfig } from '../support/containerd.ts';
import { writePrimaryNetwork } from '../support/primaryNetwork.ts';
import { PRIMARY_CONFLIST } from './primaryCni.ts';
import { pauseImageRef, rigBinary } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';
import type { ControlPlane } from './controlPlane.ts';
import { forkedChild, isRunning, startDetached, stopDetached, waitForDetached } from './detached.ts';
import { APISERVER_PORT, type ClusterAddressing, hostPort, PRIMARY_CNI_VERSION, type NodeLayout } from './layout.ts';
import { saveState, type ClusterState, type ProcessRecord } from './state.ts';

const STOP_KUBELET = 0;
const STOP_CONTAINERD = 1;
const STOP_HOLDER = 5;

/**
 * Host paths the chart's DaemonSet mounts, each replaced in the node's mount namespace by a
 * directory of the node's own: two nodes on one machine must not share a CNI config or socket dir.
 */
const NODE_PRIVATE_PATHS = [
  { hostPath: '/etc/cni/net.d', nodeDir: 'cni/net.d' },
  { hostPath: '/opt/cni/bin', nodeDir: 'cni/bin' },
  { hostPath: '/run/istio-cni', nodeDir: 'run/istio-cni' },
  // The agent's ZDS socket (ambient): a fake ztunnel on the host connects to it in the node's directory.
  { hostPath: '/run/ztunnel', nodeDir: 'run/ztunnel' },
] as const;

/** Where a node-private host path (see NODE_PRIVATE_PATHS) is on this machine. */
export function nodePrivateDir(node: NodeLayout, hostPath: (typeof NODE_PRIVATE_PATHS)[number]['hostPath']): string {
  const entry = NODE_PRIVATE_PATHS.find((p) => p.hostPath === hostPath);
  if (entry === undefined) throw new Error(`${hostPath} is not node-private`);
  return join(node.dir, entry.nodeDir);
}

/**
 * Host-wide sysctls kubelet sets at start (its "kernel tunables": vm.overcommit_memory=1,
 * kernel.panic=10, …); their values before are recorded so `make down` puts them back.
 */
export const KUBELET_KERNEL_TUNABLES = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
] as const;

export interface RunningNode {
  layout: NodeLayout;
  /**
   * The node's namespace holder: PID 1 of the node's PID namespace (the rig's `pause`, which reaps
   * orphans), in the node's netns and mount namespace. Killing it takes the whole node down.
   */
  holder: ProcessRecord;
  containerd: ProcessRecord;
  kubelet: ProcessRecord;
  containerdSocket: string;
  crictl(args: readonly string[]): Promise<string>;
}

/** Runs argv in the node's mount, network and PID namespaces (nsenter forks it there and waits). */
export function inNode(holderPid: number, argv: readonly string[]): string[] {
  return ['nsenter', '-t', String(holderPid), '-m', '-n', '-p', '--', ...argv];
}

/**
 * This machine's path of a node process's `/proc/<pid>` entry: the node's CRI (`crictl inspectp`)
 * reports pids of the node's PID namespace, which only the node's own /proc (reached through the
 * holder's root) resolves.
 */
export function nodeProcPath(holderPid: number, nodePid: number): string {
  return `/proc/${holderPid}/root/proc/${nodePid}`;
}

/** This machine's /proc path of the one running container named `name` on `node` (e.g. `install-cni`). */
export async function runningContainerProcPath(node: RunningNode, name: string): Promise<string> {
  const id = (await node.crictl(['ps', '--name', `^${name}$`, '--state', 'running', '-q'])).trim();
  if (!/^[0-9a-f]{64}$/.test(id)) throw new Error(`${node.layout.name}: not one running ${name} container: ${JSON.stringify(id)}`);
  const pid = (JSON.parse(await node.crictl(['inspect', id])) as { info?: { pid?: number } }).info?.pid;
  if (pid === undefined || pid <= 0) throw new Error(`${node.layout.name}: the ${name} container reports no pid`);
  return nodeProcPath(node.holder.pid, pid);
}

/** The namespace holder of node `name` as `make up` recorded it. */
export function recordedHolder(state: ClusterState, name: string): ProcessRecord | undefined {
  return state.processes.find((p) => p.name === holderName(name));
}

const holderName = (node: string) => `${node} namespaces`;

/**
 * Starts argv detached in the node's namespaces and records the process nsenter forks there (so
 * `make down` signals it, not nsenter, which would leave it running).
 */
async function startInNode(
  state: ClusterState,
  holder: ProcessRecord,
  name: string,
  argv: readonly string[],
  logFile: string,
  stopOrder: number,
): Promise<ProcessRecord> {
  return recordForkedChild(state, startDetached(name, inNode(holder.pid, argv), logFile, stopOrder));
}

/** Records wrapper, then replaces it with the child it forks once that exists. */
async function recordForkedChild(state: ClusterState, wrapper: ProcessRecord): Promise<ProcessRecord> {
  state.processes.push(wrapper);
  saveState(state);
  const child = await forkedChild(wrapper);
  state.processes[state.processes.indexOf(wrapper)] = child;
  saveState(state);
  return child;
}

/**
 * One node: its own PID namespace (PID 1 the holder, `/proc` mounted for it) and mount namespace
 * inside its netns, containerd and kubelet entered into all three, so kubelet's volume mounts are
 * the ones runc sees and the node's `/proc/1/ns/net` is the node's netns, as on a real node.
 * Returns once kubelet runs; `waitNodeReady` waits for registration.
 */
export async function startNode(
  state: ClusterState,
  node: NodeLayout,
  controlPlane: ControlPlane,
  imageTars: readonly string[],
  primaryCniVersion = PRIMARY_CNI_VERSION,
): Promise<RunningNode> {
  const holder = await startHolder(state, node);
  createCgroupRoot(state, node.cgroupRoot);

  writePrimaryNetwork({
    confDir: join(node.dir, 'cni/net.d'),
    binDir: join(node.dir, 'cni/bin'),
    ipamDataDir: join(node.dir, 'cni/ipam'),
    name: 'cluster-pods',
    bridge: 'cni0',
    subnets: node.podCidrs,
    fileName: PRIMARY_CONFLIST,
    ipMasq: false,
    cniVersion: primaryCniVersion,
  });
  await addKubernetesServiceDnat(holder, controlPlane.addressing);

  state.runtimes.push({ socket: join(node.dir, 'containerd/containerd.sock'), dir: join(node.dir, 'containerd') });
  const { containerd, containerdSocket, crictl } = await startContainerd(state, node, holder);
  for (const tar of [rigBinary('pause-image.tar'), ...imageTars]) {
    await runCommand([...ctrArgv(containerdSocket, 'k8s.io'), 'images', 'import', tar], { timeoutMs: 600_000 });
  }

  const kubelet = await startKubelet(state, node, controlPlane, holder, containerdSocket);
  return { layout: node, holder, containerd, kubelet, containerdSocket, crictl };
}

/**
 * A power cycle without drain: SIGKILL to the holder takes every process of the node at once
 * (kubelet, containerd, shims, containers, the agent) and its mount namespace (pod netns mounts,
 * kubelet's volume mounts). Then what a reboot loses goes too: the tmpfs contents under /run
 * (run/istio-cni, run/ztunnel, containerd's state dir) and the node netns' iptables, nft and ipset
 * state; what is on disk stays (CNI config and binaries, containerd's root with its images and
 * metadata, kubelet's root, host-local's allocations). Then the node starts again: holder,
 * containerd, kubelet, as `startNode` does but with the images already in the runtime.
 * The node's netns itself (its links) stands in for the machine's NICs and is kept.
 */
export async function rebootNode(
  state: ClusterState,
  running: RunningNode,
  controlPlane: ControlPlane,
  o: { beforeKubelet?: () => void | Promise<void> } = {},
): Promise<RunningNode> {
  const node = running.layout;
  const old = [running.holder, running.containerd, running.kubelet];
  try {
    process.kill(running.holder.pid, 'SIGKILL');
  } catch {
    // already gone
  }
  const deadline = Date.now() + 30_000;
  while (old.some(isRunning)) {
    if (Date.now() > deadline)
      throw new Error(
        `${node.name}: ${old
          .filter(isRunning)
          .map((p) => p.name)
          .join(', ')} outlived the holder`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
  state.processes = state.processes.filter((p) => !old.some((o) => o.pid === p.pid && o.startTime === p.startTime));
  saveState(state);

  for (const dir of [nodePrivateDir(node, '/run/istio-cni'), nodePrivateDir(node, '/run/ztunnel')]) emptyDir(dir);
  rmSync(join(node.dir, 'containerd/state'), { recursive: true, force: true });
  await flushNetnsFirewall(node.netns);

  const holder = await startHolder(state, node);
  await addKubernetesServiceDnat(holder, controlPlane.addressing);
  const { containerd, containerdSocket, crictl } = await startContainerd(state, node, holder);
  // What a node's boot runs before kubelet (a primary CNI's unit, say).
  await o.beforeKubelet?.();
  const kubelet = await startKubelet(state, node, controlPlane, holder, containerdSocket);
  return { layout: node, holder, containerd, kubelet, containerdSocket, crictl };
}

function emptyDir(dir: string): void {
  for (const entry of readdirSync(dir)) rmSync(join(dir, entry), { recursive: true, force: true });
}

/** What a reboot leaves of a netns' packet filtering: nothing (iptables nft and legacy, nft, ipsets, both families). */
async function flushNetnsFirewall(netns: string): Promise<void> {
  const inNetns = (argv: readonly string[]) => runCommand(['ip', 'netns', 'exec', netns, ...argv], { allowFailure: true });
  for (const tool of ['iptables-legacy', 'ip6tables-legacy']) {
    for (const table of ['filter', 'nat', 'mangle', 'raw']) {
      await inNetns([tool, '-w', '-t', table, '-F']);
      await inNetns([tool, '-w', '-t', table, '-X']);
    }
  }
  // The iptables-nft tables are nft tables: one flush removes them with every other.
  await runCommand(['ip', 'netns', 'exec', netns, 'nft', 'flush', 'ruleset']);
  await inNetns(['ipset', 'destroy']);
}

/** The node's namespace holder (PID 1 of its PID namespace) and the mounts of its mount namespace. */
async function startHolder(state: ClusterState, node: NodeLayout): Promise<ProcessRecord> {
  const logs = join(node.dir, 'logs');
  for (const d of [logs, ...NODE_PRIVATE_PATHS.map((p) => join(node.dir, p.nodeDir))]) mkdirSync(d, { recursive: true });

  // unshare forks the holder as PID 1 of a new PID namespace, with a /proc of that namespace in the
  // new mount namespace; --kill-child: should unshare die, the holder (and so the node) goes too.
  // A copy of the rig's pause: a rig rebuild could not replace a binary that runs.
  const pause = join(node.dir, 'pause');
  copyFileSync(rigBinary('pause'), pause);
  const holder = await recordForkedChild(
    state,
    startDetached(
      holderName(node.name),
      [
        'unshare',
        '--mount',
        '--propagation',
        'slave',
        '--pid',
        '--fork',
        '--kill-child',
        '--mount-proc',
        '--',
        'nsenter',
        `--net=/run/netns/${node.netns}`,
        '--',
        pause,
      ],
      join(logs, 'holder.log'),
      STOP_HOLDER,
    ),
  );
  const netnsLink = `net:[${statSync(`/run/netns/${node.netns}`).ino}]`;
  await waitForDetached(
    `${node.name} netns entered`,
    holder,
    async () => (readlinkSync(`/proc/${holder.pid}/ns/net`) === netnsLink ? true : undefined),
    10_000,
  );
  const mountNs = ['nsenter', '-t', String(holder.pid), '-m', '--'];
  // Shared, as systemd leaves a real node's mounts: a HostToContainer mount (the agent's netns dir)
  // needs a shared source to see the netns containerd mounts later. Still a slave of the host's, so
  // nothing propagates back out.
  await runCommand([...mountNs, 'mount', '--make-rshared', '/']);
  for (const { hostPath, nodeDir } of NODE_PRIVATE_PATHS) {
    ensureHostDir(state, hostPath);
    await runCommand([...mountNs, 'mount', '--bind', join(node.dir, nodeDir), hostPath]);
  }
  // Pod netns bind mounts stay in the node's namespace and go with it.
  await runCommand([...mountNs, 'mount', '-t', 'tmpfs', '-o', 'mode=0755', 'tmpfs', '/run/netns']);
  return holder;
}

/**
 * Without kube-proxy, the `kubernetes` Service is one DNAT in the node's netns (pods and host-network
 * pods). Its ClusterIP is of the primary family only (as on any dual-stack cluster), as is the API
 * server's address.
 */
async function addKubernetesServiceDnat(holder: ProcessRecord, addressing: ClusterAddressing): Promise<void> {
  const { primary } = addressing;
  for (const chain of ['PREROUTING', 'OUTPUT']) {
    await runCommand(
      inNode(holder.pid, [
        primary.family === 6 ? 'ip6tables' : 'iptables',
        '-w',
        '-t',
        'nat',
        '-A',
        chain,
        '-d',
        `${primary.kubernetesServiceIp}/${primary.family === 6 ? 128 : 32}`,
        '-p',
        'tcp',
        '--dport',
        '443',
        '-j',
        'DNAT',
        '--to-destination',
        hostPort(primary.controlPlaneIp, APISERVER_PORT),
      ]),
    );
  }
}

async function startContainerd(
  state: ClusterState,
  node: NodeLayout,
  holder: ProcessRecord,
): Promise<Pick<RunningNode, 'containerd' | 'containerdSocket' | 'crictl'>> {
  const containerdDir = join(node.dir, 'containerd');
  mkdirSync(containerdDir, { recursive: true });
  const containerdSocket = join(containerdDir, 'containerd.sock');
  const containerdConfig = join(containerdDir, 'config.toml');
  writeFileSync(
    containerdConfig,
    renderContainerdConfig(containerdDir, containerdSocket, '/etc/cni/net.d', '/opt/cni/bin', pauseImageRef()),
  );
  const containerd = await startInNode(
    state,
    holder,
    `${node.name} containerd`,
    containerdArgv(containerdConfig),
    join(node.dir, 'logs/containerd.log'),
    STOP_CONTAINERD,
  );
  const crictlConfig = join(containerdDir, 'crictl.yaml');
  writeFileSync(crictlConfig, `runtime-endpoint: unix://${containerdSocket}\nimage-endpoint: unix://${containerdSocket}\ntimeout: 60\n`);
  const crictl = async (args: readonly string[]) =>
    (await runCommand([rigBinary('crictl'), '--config', crictlConfig, ...args], { timeoutMs: 90_000 })).stdout;
  await waitForDetached(
    `${node.name} containerd CRI`,
    containerd,
    async () => ((await crictl(['version'])).includes('RuntimeName') ? true : undefined),
    60_000,
  );
  return { containerd, containerdSocket, crictl };
}

/**
 * A node restart short of its namespaces (the holder, its netns and mounts stay): kubelet stopped,
 * then the named containers (SIGKILL, so nothing of theirs cleans up), then containerd; the node's
 * `/run/istio-cni` emptied, as a reboot empties the tmpfs `/run`; containerd and kubelet started again.
 * Other containers keep running under their shims, which the new containerd picks up.
 */
export async function restartNode(
  state: ClusterState,
  node: RunningNode,
  controlPlane: ControlPlane,
  stopContainers: readonly string[],
): Promise<void> {
  // startInNode records each new process; the stopped one's record goes.
  const forget = (old: ProcessRecord) => {
    state.processes = state.processes.filter((p) => !(p.pid === old.pid && p.startTime === old.startTime));
    saveState(state);
  };
  await stopDetached(node.kubelet);
  for (const name of stopContainers) {
    for (const id of (await node.crictl(['ps', '--name', `^${name}$`, '-q'])).split('\n').filter(Boolean)) {
      await node.crictl(['stop', '--timeout', '0', id]);
    }
  }
  await stopDetached(node.containerd);
  const runDir = nodePrivateDir(node.layout, '/run/istio-cni');
  for (const entry of readdirSync(runDir)) rmSync(join(runDir, entry), { recursive: true, force: true });
  const { containerd } = await startContainerd(state, node.layout, node.holder);
  forget(node.containerd);
  node.containerd = containerd;
  const kubelet = await startKubelet(state, node.layout, controlPlane, node.holder, node.containerdSocket);
  forget(node.kubelet);
  node.kubelet = kubelet;
}

async function startKubelet(
  state: ClusterState,
  node: NodeLayout,
  controlPlane: ControlPlane,
  holder: ProcessRecord,
  containerdSocket: string,
): Promise<ProcessRecord> {
  if (Object.keys(state.sysctls).length === 0) {
    for (const key of KUBELET_KERNEL_TUNABLES) state.sysctls[key] = readFileSync(`/proc/sys/${key}`, 'utf8').trim();
    saveState(state);
  }
  const dir = join(node.dir, 'kubelet');
  for (const d of ['root', 'pki', 'pod-logs', 'volume-plugins']) mkdirSync(join(dir, d), { recursive: true });
  const resolvConf = join(dir, 'resolv.conf');
  // No cluster DNS runs; pods get an empty resolver configuration rather than the host's.
  writeFileSync(resolvConf, '# no cluster DNS\n');
  const kubeconfig = join(dir, 'kubelet.kubeconfig');
  const token = controlPlane.nodeTokens.get(node.name);
  if (token === undefined) throw new Error(`no kubelet token for ${node.name}`);
  controlPlane.writeKubeconfig(kubeconfig, token);
  const config = {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    containerRuntimeEndpoint: `unix://${containerdSocket}`,
    // The rig's containerd runs runc with cgroupfs; this machine has cgroup v1 (hybrid) and no systemd.
    cgroupDriver: 'cgroupfs',
    cgroupRoot: `/${node.cgroupRoot}`,
    failCgroupV1: false,
    failSwapOn: false,
    // No kube-proxy; the chains would only clutter the node's netns.
    makeIPTablesUtilChains: false,
    podLogsDir: join(dir, 'pod-logs'),
    volumePluginDir: join(dir, 'volume-plugins'),
    resolvConf,
    clusterDomain: 'cluster.local',
    address: node.ip,
    port: 10250,
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    healthzPort: 10248,
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: controlPlane.pki.caCert },
    },
    authorization: { mode: 'Webhook' },
    // The node image is imported, never pulled (pullPolicy Never): image GC must not delete it, and a
    // busy shared disk must not evict the DaemonSet.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
    rotateCertificates: false,
    serializeImagePulls: false,
  };
  const configPath = join(dir, 'kubelet.yaml');
  writeFileSync(configPath, `${JSON.stringify(config, null, 2)}\n`);
  return startInNode(
    state,
    holder,
    `${node.name} kubelet`,
    [
      rigBinary('kubelet'),
      `--config=${configPath}`,
      `--kubeconfig=${kubeconfig}`,
      `--root-dir=${join(dir, 'root')}`,
      `--cert-dir=${join(dir, 'pki')}`,
      `--hostname-override=${node.name}`,
      `--node-ip=${node.ips.join(',')}`,
    ],
    join(node.dir, 'logs/kubelet.log'),
    STOP_KUBELET,
  );
}

/** Resolves once the Node is registered and Ready; records its pod CIDR on it (informational: the bridge conflist already routes it). */
export async function waitNodeReady(controlPlane: ControlPlane, node: RunningNode, timeoutMs = 180_000): Promise<void> {
  const path = `/api/v1/nodes/${node.layout.name}`;
  await waitForDetached(
    `Node ${node.layout.name} Ready`,
    node.kubelet,
    async () => {
      const res = await controlPlane.api.request<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', path);
      if (res.status !== 200) return undefined;
      return res.body.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true ? true : undefined;
    },
    timeoutMs,
  );
  await controlPlane.api.must(
    'PATCH',
    path,
    { spec: { podCIDR: node.layout.podCidr, podCIDRs: node.layout.podCidrs } },
    { contentType: 'application/merge-patch+json' },
  );
}

/** Creates path (and missing parents) on the host as an empty mount point, recording what it created. */
function ensureHostDir(state: ClusterState, path: string): void {
  const missing: string[] = [];
  for (let p = path; !existsSync(p); p = dirname(p)) missing.unshift(p);
  for (const p of missing) {
    mkdirSync(p);
    state.hostDirs.push(p);
    saveState(state);
  }
}

/** kubelet's cgroupRoot must exist in every hierarchy before it starts. */
function createCgroupRoot(state: ClusterState, name: string): void {
  state.cgroups.push(name);
  saveState(state);
  for (const hierarchy of cgroupHierarchies()) {
    const dir = join(hierarchy, name);
    if (!existsSync(dir)) mkdirSync(dir);
    // A new v1 cpuset starts with no CPUs or memory nodes; give it the parent's.
    for (const file of ['cpuset.cpus', 'cpuset.mems']) {
      if (existsSync(join(hierarchy, file))) writeFileSync(join(dir, file), readFileSync(join(hierarchy, file)));
    }
  }
}
