/**
 * Side by side with the agent users would run instead: upstream Istio's Go `install-cni` and
 * `istio-cni`, built by bench/upstream/build.sh. Both daemons run against the rig's real
 * kube-apiserver holding a few hundred realistic pods, each with the chart's default environment
 * (sidecar mode, repair on) and scratch host dirs; every timed figure is taken in pairs (upstream,
 * ours, alternating which goes first) so that machine drift hits both alike, and its ratio is the
 * median of the per-pair ratios.
 *
 * The plugin's figures have a third column: our plugin built as a Node single-executable application
 * (`scripts/build.ts --plugin-compiler node-sea`, into a scratch directory), the build it replaced,
 * run against our daemon in the same rounds (docs/decisions.md, "The plugin: Bun").
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findObject, parseManifest, DEFAULT_MANIFEST, RELEASE_NAMESPACE } from '../test/e2e/support/chart.ts';
import { startCluster, type Cluster } from '../test/e2e/support/cluster.ts';
import { freePort } from '../test/support/freePort.ts';
import { REPO_ROOT } from '../test/e2e/support/rigPaths.ts';
import { median, timeProcess } from './measure.ts';
import { addPodNetns } from '../test/support/addPodNetns.ts';
import { CAPTURE_CHAIN, netnsRuleset } from '../test/support/netnsRuleset.ts';
import { realisticPod } from './realisticPod.ts';

export const BENCH_CACHE = process.env.BENCH_CACHE ?? join(REPO_ROOT, '.bench-cache');
const UPSTREAM_BIN = join(BENCH_CACHE, 'bin');
const SANDBOX = join(REPO_ROOT, 'bench/upstream/sandbox.sh');
/** PEER_OURS_DIST points at another build of ours (a before/after comparison); dist/ by default. */
const DIST = process.env.PEER_OURS_DIST ?? join(REPO_ROOT, 'dist');
const NODE_NAME = 'bench-node';
const NAMESPACE = 'bench';
/** Upstream's readiness port is not settable. */
const UPSTREAM_READINESS_PORT = 8000;
const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const PRIMARY_CONFLIST = 'primary.conflist';

export type Side = 'upstream' | 'ours';

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}

/** The chart's ConfigMap plus the install-cni container's env (downward API resolved) and args. */
export function chartEnvironment(): { env: Record<string, string>; args: string[] } {
  const objects = parseManifest(readFileSync(DEFAULT_MANIFEST, 'utf8'));
  const env: Record<string, string> = { ...(findObject(objects, 'ConfigMap', 'istio-cni-config').data as Record<string, string>) };
  const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
    spec: { template: { spec: { containers: { name: string; args?: string[]; env?: EnvVar[] }[] } } };
  };
  const container = ds.spec.template.spec.containers.find((c) => c.name === 'install-cni');
  if (container === undefined) throw new Error('the DaemonSet has no install-cni container');
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    const field = e.valueFrom?.fieldRef?.fieldPath;
    if (field === 'spec.nodeName') env[e.name] = NODE_NAME;
    else if (field === 'metadata.name') env[e.name] = 'istio-cni-node-bench';
    else if (field === 'metadata.namespace') env[e.name] = RELEASE_NAMESPACE;
  }
  return { env, args: container.args ?? [] };
}

/** One node's worth of host dirs and one daemon, ours or upstream's. */
export interface Peer {
  side: Side;
  /** Names the peer's scratch dir: the side, or which build of ours (bench/bunDaemon.ts). */
  label: string;
  dir: string;
  netDir: string;
  runDir: string;
  /** The installed plugin, as the container runtime runs it. */
  plugin: string;
  daemonBinary: string;
  pluginSource: string;
  child: ChildProcess | undefined;
  readinessPort: number;
  spawnDaemon(): ChildProcess;
}

/** `dist` (ours only, default DIST) holds the build of ours to run: its istio-cni and install-cni. */
export function makePeer(
  side: Side,
  cluster: Cluster,
  chart: { env: Record<string, string>; args: string[] },
  readinessPort: number,
  monitoringPort: number,
  ctrlzPort: number,
  ours: { dist: string; label: string } = { dist: DIST, label: side },
  /** Runs the daemon under this command, e.g. `ip netns exec NAME` (bench/fleet.ts). */
  wrap: string[] = [],
): Peer {
  const label = side === 'ours' ? ours.label : side;
  const dir = mkdtempSync(join(tmpdir(), `istio-cni-bench-${label}-`));
  const imageBin = join(dir, 'image/opt/cni/bin');
  const hostBin = join(dir, 'host/opt/cni/bin');
  const netDir = join(dir, 'host/etc/cni/net.d');
  const runDir = join(dir, 'host/var/run/istio-cni');
  const saDir = join(dir, 'serviceaccount');
  for (const d of [imageBin, hostBin, netDir, saDir]) mkdirSync(d, { recursive: true });
  const pluginSource = side === 'ours' ? join(ours.dist, 'istio-cni') : join(UPSTREAM_BIN, 'istio-cni');
  copyFileSync(pluginSource, join(imageBin, 'istio-cni'));
  const daemonBinary = join(dir, 'install-cni');
  copyFileSync(side === 'ours' ? join(ours.dist, 'install-cni') : join(UPSTREAM_BIN, 'install-cni'), daemonBinary);
  writeFileSync(join(saDir, 'token'), cluster.adminToken);
  writeFileSync(join(saDir, 'ca.crt'), cluster.caPem);
  writeFileSync(join(saDir, 'namespace'), RELEASE_NAMESPACE);
  writePrimaryConflist(netDir);
  const env: Record<string, string> = {
    ...PATH_ENV,
    ...chart.env,
    KUBERNETES_SERVICE_HOST: cluster.host,
    KUBERNETES_SERVICE_PORT: String(cluster.port),
    MOUNTED_CNI_NET_DIR: netDir,
    CNI_AGENT_RUN_DIR: runDir,
    MONITORING_PORT: String(monitoringPort),
  };
  const log = join(dir, 'install-cni.log');
  const peer: Peer = {
    side,
    label,
    dir,
    netDir,
    runDir,
    plugin: join(hostBin, 'istio-cni'),
    daemonBinary,
    pluginSource,
    child: undefined,
    readinessPort,
    spawnDaemon() {
      let argv: string[];
      let daemonEnv = env;
      if (side === 'ours') {
        argv = [daemonBinary, ...chart.args];
        daemonEnv = {
          ...env,
          CNI_BIN_SOURCE_DIR: imageBin,
          CNI_BIN_TARGET_DIRS: hostBin,
          SERVICE_ACCOUNT_DIR: saDir,
          READINESS_PORT: String(readinessPort),
          // E.g. `--cpu-prof --cpu-prof-dir=…` to see where an agent's CPU goes (docs/benchmarks.md).
          ...(process.env.PEER_OURS_NODE_OPTIONS ? { NODE_OPTIONS: process.env.PEER_OURS_NODE_OPTIONS } : {}),
        };
      } else {
        const root = join(dir, 'root');
        mkdirSync(root, { recursive: true });
        argv = [
          'unshare',
          '--mount',
          '--propagation',
          'private',
          '--',
          'bash',
          SANDBOX,
          root,
          imageBin,
          hostBin,
          saDir,
          '--',
          daemonBinary,
          ...chart.args,
          `--ctrlz_port=${ctrlzPort}`,
        ];
      }
      argv = [...wrap, ...argv];
      const fd = openSync(log, 'a');
      const child = spawn(argv[0] as string, argv.slice(1), { env: daemonEnv, stdio: ['ignore', fd, fd] });
      closeSync(fd);
      peer.child = child;
      return child;
    },
  };
  return peer;
}

function writePrimaryConflist(netDir: string): void {
  const conflist = {
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    plugins: [
      { type: 'bridge', bridge: 'cni0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet: '10.244.0.0/24' } },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  writeFileSync(join(netDir, PRIMARY_CONFLIST), `${JSON.stringify(conflist, null, 2)}\n`);
}

/** The istio-cni entry of the primary conflist, as the runtime hands it to the plugin (name, cniVersion, prevResult). */
export function pluginConfig(peer: Peer): string | undefined {
  let doc: { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
  try {
    doc = JSON.parse(readFileSync(join(peer.netDir, PRIMARY_CONFLIST), 'utf8')) as typeof doc;
  } catch {
    return undefined;
  }
  const entry = doc.plugins.find((p) => p.type === 'istio-cni');
  if (entry === undefined) return undefined;
  return JSON.stringify({
    ...entry,
    cniVersion: doc.cniVersion,
    name: doc.name,
    prevResult: {
      cniVersion: doc.cniVersion,
      interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/bench' }],
      ips: [{ address: '10.244.0.5/24', gateway: '10.244.0.1', interface: 0 }],
      dns: {},
    },
  });
}

export async function readyzStatus(port: number, host = '127.0.0.1'): Promise<number> {
  try {
    return (await fetch(`http://${host}:${port}/readyz`, { signal: AbortSignal.timeout(1000) })).status;
  } catch {
    return 0;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => child.once('exit', () => r()));
}

export async function stopDaemon(peer: Peer, signal: NodeJS.Signals): Promise<void> {
  const child = peer.child;
  if (child === undefined) return;
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  await exited(child);
  clearTimeout(timer);
  peer.child = undefined;
}

/** Starts the daemon; resolves with ms from spawn to the istio-cni entry in the conflist and to /readyz 200. */
export async function startTimed(peer: Peer): Promise<{ conflistMs: number; readyMs: number }> {
  const start = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - start) / 1e6;
  const child = peer.spawnDaemon();
  let conflistMs: number | undefined;
  let readyMs: number | undefined;
  const deadline = Date.now() + 60_000;
  const conflistWatch = (async () => {
    while (conflistMs === undefined && Date.now() < deadline && child.exitCode === null) {
      if (pluginConfig(peer) !== undefined) conflistMs = since();
      else await sleep(5);
    }
  })();
  while (readyMs === undefined && Date.now() < deadline && child.exitCode === null) {
    if ((await readyzStatus(peer.readinessPort)) === 200) readyMs = since();
    else await sleep(5);
  }
  await conflistWatch;
  if (conflistMs === undefined || readyMs === undefined) {
    const log = readFileSync(join(peer.dir, 'install-cni.log'), 'utf8').split('\n').slice(-30).join('\n');
    throw new Error(`${peer.label} install-cni did not install and become ready (exit ${child.exitCode}):\n${log}`);
  }
  return { conflistMs, readyMs };
}

const SIDECAR_STATUS = '{"initContainers":["istio-validation"],"containers":["istio-proxy"]}';

/** One pod as kubelet would have reported it running; `meshed` adds an injected sidecar. */
export interface BenchPod {
  name: string;
  namespace: string;
  nodeName: string;
  podIP: string;
  meshed: boolean;
  labels: Record<string, string>;
}

/** Creates the pod, then writes the status kubelet would report (Running, its IP). */
export async function createRunningPod(cluster: Cluster, pod: BenchPod): Promise<void> {
  const { name, namespace, meshed } = pod;
  const containers = meshed
    ? [
        { name: 'app', image: 'nginx' },
        { name: 'istio-proxy', image: 'proxyv2' },
      ]
    : [{ name: 'app', image: 'nginx' }];
  const base = realisticPod({
    metadata: { name, namespace, labels: pod.labels },
    spec: { nodeName: pod.nodeName, containers, ...(meshed ? { initContainers: [{ name: 'istio-validation', image: 'proxyv2' }] } : {}) },
    status: { podIP: pod.podIP },
  } as unknown as Parameters<typeof realisticPod>[0]) as unknown as {
    metadata: Record<string, unknown>;
    spec: Record<string, unknown>;
    status: Record<string, unknown>;
  };
  const annotations = {
    ...(base.metadata.annotations as Record<string, string>),
    ...(meshed ? { 'sidecar.istio.io/status': SIDECAR_STATUS } : {}),
  };
  const { managedFields: _managedFields, creationTimestamp: _created, ownerReferences: _owners, ...metadata } = base.metadata;
  const created = await cluster.api.must<{ metadata: { resourceVersion: string } }>('POST', `/api/v1/namespaces/${namespace}/pods`, {
    ...base,
    metadata: { ...metadata, annotations },
  });
  // Creation resets the status; kubelet's report is what makes a cached pod its real size.
  await cluster.api.must('PUT', `/api/v1/namespaces/${namespace}/pods/${name}/status`, {
    ...base,
    metadata: { ...metadata, annotations, resourceVersion: created.metadata.resourceVersion },
    status: { ...base.status, phase: 'Running', podIPs: [{ ip: pod.podIP }] },
  });
}

/** Runs `work` over items, `concurrency` at a time. */
export async function inParallel<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  const queue = [...items];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let item = queue.shift(); item !== undefined; item = queue.shift()) await work(item);
    }),
  );
}

/** count pods on the bench node, one in ten with an injected sidecar, each as kubelet would have reported it. */
export async function createPods(cluster: Cluster, count: number): Promise<void> {
  await cluster.ensureNamespace(NAMESPACE);
  const pods = Array.from({ length: count }, (_, i) => ({
    name: `app-${i}`,
    namespace: NAMESPACE,
    nodeName: NODE_NAME,
    podIP: `10.244.${Math.floor(i / 250)}.${(i % 250) + 2}`,
    meshed: i % 10 === 0,
    labels: { app: `app-${i % 20}` },
  }));
  await inParallel(pods, 8, (pod) => createRunningPod(cluster, pod));
}

/**
 * Runs every scenario once per round after warm-up rounds, each round starting one scenario later
 * (a b c, b c a, c a b, …; for two: a b, b a), so machine drift hits all alike; one series per
 * scenario, round by round.
 */
async function rounds<T = number>(runs: number, warmup: number, scenarios: (() => Promise<T>)[]): Promise<T[][]> {
  const out = scenarios.map(() => [] as T[]);
  for (let i = 0; i < warmup + runs; i++) {
    const taken: T[] = [];
    for (let k = 0; k < scenarios.length; k++) {
      const j = (i + k) % scenarios.length;
      taken[j] = await (scenarios[j] as () => Promise<T>)();
    }
    if (i >= warmup) {
      for (const [j, v] of taken.entries()) out[j]?.push(v);
    }
  }
  return out;
}

/** Runs a and b alternately (a b, b a, …) after warm-up rounds; returns both series, pair by pair. */
export async function paired<T = number>(
  runs: number,
  warmup: number,
  a: () => Promise<T>,
  b: () => Promise<T>,
): Promise<{ a: T[]; b: T[] }> {
  const [sa = [], sb = []] = await rounds(runs, warmup, [a, b]);
  return { a: sa, b: sb };
}

export interface PairedStarts {
  conflistMs: { a: number[]; b: number[] };
  readyMs: { a: number[]; b: number[] };
  crashReadyMs: { a: number[]; b: number[] };
}

/**
 * `starts` daemon starts of a and b, paired: after a graceful stop (which removed what the daemon
 * installed, as on a rolling update: every start installs), then after a crash (SIGKILL: plugin,
 * kubeconfig and conflist entry still in place). Leaves both stopped as a graceful stop leaves them.
 */
export async function pairedStarts(a: Peer, b: Peer, starts: number): Promise<PairedStarts> {
  const startOnce = async (peer: Peer) => {
    const timed = await startTimed(peer);
    await stopDaemon(peer, 'SIGTERM');
    return timed;
  };
  const graceful = await paired(
    starts,
    1,
    () => startOnce(a),
    () => startOnce(b),
  );
  const crashStart = async (peer: Peer) => {
    const { readyMs } = await startTimed(peer);
    await stopDaemon(peer, 'SIGKILL');
    return readyMs;
  };
  await crashStart(a);
  await crashStart(b);
  const crashReadyMs = await paired(
    starts,
    1,
    () => crashStart(a),
    () => crashStart(b),
  );
  for (const p of [a, b]) {
    await startTimed(p);
    await stopDaemon(p, 'SIGTERM');
  }
  const pick = (key: 'conflistMs' | 'readyMs') => ({ a: graceful.a.map((t) => t[key]), b: graceful.b.map((t) => t[key]) });
  return { conflistMs: pick('conflistMs'), readyMs: pick('readyMs'), crashReadyMs };
}

interface Row {
  figure: string;
  upstream: number;
  ours: number;
  /** Median of per-pair ratios when the figure was paired, else ours / upstream. */
  ratio: number;
  /** Our plugin as a Node SEA (the yardstick), and its ratio to upstream, for the plugin's figures. */
  nodeSea?: { value: number; ratio: number };
  runs: string;
  unit: string;
}

function pairedRow(figure: string, unit: string, series: { a: number[]; b: number[] }): Row {
  const ratios = series.b.map((v, i) => v / (series.a[i] as number));
  return { figure, upstream: median(series.a), ours: median(series.b), ratio: median(ratios), runs: `${series.a.length} pairs`, unit };
}

/** Measured in rounds of three (upstream, ours, the Node SEA plugin); ratios are medians of per-round ratios. */
function pluginRow(figure: string, unit: string, [up, ours, sea]: number[][]): Row {
  const ratioTo = (series: number[]) => median(series.map((v, i) => v / (up?.[i] as number)));
  return {
    figure,
    upstream: median(up ?? []),
    ours: median(ours ?? []),
    ratio: ratioTo(ours ?? []),
    nodeSea: { value: median(sea ?? []), ratio: ratioTo(sea ?? []) },
    runs: `${up?.length ?? 0} rounds`,
    unit,
  };
}

function singleRow(figure: string, unit: string, upstream: number, ours: number, runs = '1'): Row {
  return { figure, upstream, ours, ratio: ours / upstream, runs, unit };
}

export function procStatus(pid: number): { rssMiB: number; anonMiB: number } {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { rssMiB: kb('VmRSS') / 1024, anonMiB: kb('RssAnon') / 1024 };
}

/** Sum of the API server's open WATCH requests. */
async function openWatches(cluster: Cluster): Promise<number> {
  const res = await cluster.api.request('GET', '/metrics');
  let total = 0;
  for (const line of res.text.split('\n')) {
    if (line.startsWith('apiserver_longrunning_requests{') && line.includes('verb="WATCH"'))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

/** Peak RSS in MiB of one run of argv, through GNU time's %M. */
async function peakMiB(argv: string[], env: NodeJS.ProcessEnv, stdin: string, scratch: string): Promise<number> {
  const out = join(scratch, 'time.out');
  await timeProcess(['/usr/bin/time', '-f', '%M', '-o', out, ...argv], env, stdin);
  return Number(readFileSync(out, 'utf8').trim().split('\n').pop()) / 1024;
}

function printRows(rows: Row[]): void {
  console.log("\n## Side by side with upstream Istio's Go agent (ratio = ours / upstream)\n");
  console.log('| figure | upstream | ours | ratio | plugin as Node SEA | its ratio | runs |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    const digits = r.unit === 'ms' || r.unit === 'MiB' ? 1 : 0;
    const fmt = (v: number) => `${v.toFixed(digits)}${r.unit === '' ? '' : ` ${r.unit}`}`;
    const sea = r.nodeSea ? `${fmt(r.nodeSea.value)} | ${r.nodeSea.ratio.toFixed(2)}` : '- | -';
    console.log(`| ${r.figure} | ${fmt(r.upstream)} | ${fmt(r.ours)} | ${r.ratio.toFixed(2)} | ${sea} | ${r.runs} |`);
  }
}

/** The ADD a container runtime runs for a pod outside the mesh (`app-1`). */
const ADD_ENV = {
  ...PATH_ENV,
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'bench0123456789',
  CNI_NETNS: '/var/run/netns/bench',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NAMESPACE};K8S_POD_NAME=app-1;K8S_POD_INFRA_CONTAINER_ID=bench0123456789`,
};

/**
 * The ADD of a pod with an injected sidecar (`app-0`) into a netns of its own, as the runtime runs it
 * after the primary plugin: upstream's plugin programs the capture itself, ours hands it to its agent.
 * A run that left no capture chain in the netns fails the bench: a skipped pod is not a fast ADD.
 */
function sidecarAdd(peer: PluginUnderTest, confs: Map<Side, string>): () => Promise<number> {
  let n = 0;
  const tag = peer.label ?? peer.side;
  return async () => {
    const netns = addPodNetns(`bench-sc-${tag}-`, n);
    const containerId = `benchsidecar${tag}${n++}`;
    try {
      const conf = JSON.parse(confs.get(peer.side) ?? '{}') as { prevResult?: Record<string, unknown> };
      conf.prevResult = {
        ...conf.prevResult,
        interfaces: [{ name: 'eth0', sandbox: netns.path }],
        ips: [{ address: netns.address, gateway: netns.gateway, interface: 0 }],
      };
      const ms = await timeProcess(
        [peer.plugin],
        {
          ...ADD_ENV,
          CNI_CONTAINERID: containerId,
          CNI_NETNS: netns.path,
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NAMESPACE};K8S_POD_NAME=app-0;K8S_POD_INFRA_CONTAINER_ID=${containerId}`,
        },
        JSON.stringify(conf),
      );
      if (!CAPTURE_CHAIN.test(await netnsRuleset(netns.path)))
        throw new Error(`${tag}: a sidecar ADD left no capture rules in ${netns.name}`);
      return ms;
    } finally {
      netns.remove();
    }
  };
}

/** One plugin executable as the runtime runs it, with the daemon (and conflist entry) of its side. */
interface PluginUnderTest {
  side: Side;
  /** Names its netns and containers when two plugins share a side (default: the side). */
  label?: string;
  plugin: string;
  /** Scratch space of its own. */
  dir: string;
}

/** How many ADDs the burst figures start at once, and how many bursts each plugin runs. */
const BURST_ADDS = 100;
const BURST_ROUNDS = 3;

/**
 * BURST_ADDS ADDs of distinct pods outside the mesh started at once (a node scheduling a burst):
 * each round's wall time until the last exits and the sum of their peak RSS (GNU time's %M).
 */
async function burstRows(plugins: PluginUnderTest[], confs: Map<Side, string>): Promise<Row[]> {
  const rss = plugins.map(() => [] as number[]);
  const burst = (p: PluginUnderTest, into: number[]) => async () => {
    const scratch = mkdtempSync(join(p.dir, 'burst-'));
    try {
      const start = process.hrtime.bigint();
      await Promise.all(
        Array.from({ length: BURST_ADDS }, (_, i) => {
          // app-N with N not a multiple of 10: the pods outside the mesh (createPods).
          const pod = `app-${i + Math.floor(i / 9) + 1}`;
          const id = `benchburst${i}`;
          const env = {
            ...ADD_ENV,
            CNI_CONTAINERID: id,
            CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NAMESPACE};K8S_POD_NAME=${pod};K8S_POD_INFRA_CONTAINER_ID=${id}`,
          };
          return timeProcess(['/usr/bin/time', '-f', '%M', '-o', join(scratch, String(i)), p.plugin], env, confs.get(p.side));
        }),
      );
      const wallMs = Number(process.hrtime.bigint() - start) / 1e6;
      let kib = 0;
      for (let i = 0; i < BURST_ADDS; i++)
        kib += Number(
          readFileSync(join(scratch, String(i)), 'utf8')
            .trim()
            .split('\n')
            .pop(),
        );
      into.push(kib / 1024);
      return wallMs;
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  };
  const walls = await rounds(
    BURST_ROUNDS,
    1,
    plugins.map((p, i) => burst(p, rss[i] as number[])),
  );
  return [
    pluginRow(`${BURST_ADDS} concurrent ADDs of pods not in the mesh, daemon running: wall`, 'ms', walls),
    // The warm-up round's burst is the first of each series.
    pluginRow(
      `… sum of their ${BURST_ADDS} peak RSS`,
      'MiB',
      rss.map((series) => series.slice(1)),
    ),
  ];
}

/** The plugin's figures with both daemons up: VERSION, a non-mesh ADD, a sidecar ADD, a burst. */
async function pluginRowsWithDaemon(plugins: PluginUnderTest[], confs: Map<Side, string>, runs: number): Promise<Row[]> {
  const versionStdin = JSON.stringify({ cniVersion: '1.0.0' });
  const version = (p: PluginUnderTest) => () => timeProcess([p.plugin], { ...PATH_ENV, CNI_COMMAND: 'VERSION' }, versionStdin);
  const add = (p: PluginUnderTest) => () => timeProcess([p.plugin], ADD_ENV, confs.get(p.side));
  return [
    pluginRow('plugin VERSION', 'ms', await rounds(runs, 3, plugins.map(version))),
    pluginRow('ADD of a pod not in the mesh, daemon running', 'ms', await rounds(runs, 3, plugins.map(add))),
    pluginRow(
      'sidecar ADD into a fresh netns, daemon running',
      'ms',
      await rounds(
        runs,
        3,
        plugins.map((p) => sidecarAdd(p, confs)),
      ),
    ),
    ...(await burstRows(plugins, confs)),
  ];
}

/** With both daemons gone (killed, so their conflist entries and plugin kubeconfigs stay): the plugin on its own. */
async function noDaemonRows(plugins: PluginUnderTest[], confs: Map<Side, string>, runs: number): Promise<Row[]> {
  const add = (p: PluginUnderTest) => () => timeProcess([p.plugin], ADD_ENV, confs.get(p.side));
  const time = pluginRow('ADD of a pod not in the mesh, no daemon', 'ms', await rounds(runs, 3, plugins.map(add)));
  const peak = (p: PluginUnderTest) => () => peakMiB([p.plugin], ADD_ENV, confs.get(p.side) as string, p.dir);
  const peaks = await rounds(Math.min(runs, 5), 1, plugins.map(peak));
  return [time, pluginRow('peak RSS of that ADD', 'MiB', peaks)];
}

/** Our plugin built as a Node SEA (the build the Bun one replaced), into `dir`. */
function buildNodeSeaPlugin(dir: string): string {
  const r = spawnSync(
    process.execPath,
    [join(REPO_ROOT, 'scripts/build.ts'), '--out-dir', dir, '--plugin-compiler', 'node-sea', 'istio-cni'],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  if (r.status !== 0) throw new Error(`building the Node SEA plugin exited ${r.status ?? r.signal}`);
  return join(dir, 'istio-cni');
}

export interface PeerBenchOptions {
  /**
   * `degraded`: only the plugin's figures with no daemon running (both daemons start once, then
   * crash); `plugin`: all the plugin's figures, the daemons' restarts and memory left out.
   */
  only?: 'degraded' | 'plugin';
  runs: number;
  /** Daemon restarts measured per side. */
  starts: number;
  pods: number;
}

export async function benchUpstreamPeer(options: PeerBenchOptions): Promise<void> {
  for (const bin of ['istio-cni', 'install-cni']) {
    if (!existsSync(join(UPSTREAM_BIN, bin)))
      throw new Error(`${join(UPSTREAM_BIN, bin)} is missing: run \`bash bench/upstream/build.sh\``);
  }
  if ((await readyzStatus(UPSTREAM_READINESS_PORT)) !== 0)
    throw new Error(`port ${UPSTREAM_READINESS_PORT} is taken: upstream's readiness server needs it`);
  const seaDir = mkdtempSync(join(tmpdir(), 'istio-cni-bench-node-sea-'));
  const peers: Peer[] = [];
  let cluster: Cluster | undefined;
  try {
    const nodeSea = { side: 'ours' as const, label: 'nodesea', plugin: buildNodeSeaPlugin(seaDir), dir: seaDir };
    cluster = await startCluster();
    const t0 = Date.now();
    await createPods(cluster, options.pods);
    console.log(`\n(${options.pods} pods created in ${((Date.now() - t0) / 1000).toFixed(1)} s on the rig's kube-apiserver)`);
    const chart = chartEnvironment();
    const upstream = makePeer('upstream', cluster, chart, UPSTREAM_READINESS_PORT, await freePort(), await freePort());
    const ours = makePeer('ours', cluster, chart, await freePort(), await freePort(), 0);
    peers.push(upstream, ours);
    const plugins: PluginUnderTest[] = [upstream, ours, nodeSea];
    const mib = (p: string) => statSync(p).size / 1024 / 1024;
    const sizeRows = (): Row[] => [
      singleRow('executable size, install-cni', 'MiB', mib(join(UPSTREAM_BIN, 'install-cni')), mib(join(DIST, 'install-cni')), '-'),
      {
        ...singleRow('executable size, istio-cni', 'MiB', mib(upstream.pluginSource), mib(ours.pluginSource), '-'),
        nodeSea: { value: mib(nodeSea.plugin), ratio: mib(nodeSea.plugin) / mib(upstream.pluginSource) },
      },
    ];
    const rows: Row[] = [];
    if (options.only !== undefined) {
      for (const p of peers) await startTimed(p);
      const confs = new Map(peers.map((p) => [p.side, pluginConfig(p) as string]));
      if (options.only === 'plugin') rows.push(...(await pluginRowsWithDaemon(plugins, confs, options.runs)));
      for (const p of peers) await stopDaemon(p, 'SIGKILL');
      rows.push(...(await noDaemonRows(plugins, confs, options.runs)), ...sizeRows());
      printRows(rows);
      return;
    }

    const starts = await pairedStarts(upstream, ours, options.starts);
    rows.push(pairedRow('daemon start → istio-cni entry in the conflist', 'ms', starts.conflistMs));
    rows.push(pairedRow('daemon start → `/readyz` 200', 'ms', starts.readyMs));
    rows.push(pairedRow('daemon restart after a crash → `/readyz` 200', 'ms', starts.crashReadyMs));

    // Both daemons up for the plugin figures and the steady-state memory.
    await startTimed(upstream);
    await startTimed(ours);
    const readyAt = Date.now();
    const confs = new Map(peers.map((p) => [p.side, pluginConfig(p) as string]));
    // The daemons' memory first, before the plugin's bursts have passed through them.
    await sleep(Math.max(0, 20_000 - (Date.now() - readyAt)));
    const memUp = procStatus(upstream.child?.pid as number);
    const memOurs = procStatus(ours.child?.pid as number);
    rows.push(singleRow(`daemon RSS ≥ 20 s after ready, ${options.pods} pods`, 'MiB', memUp.rssMiB, memOurs.rssMiB));
    rows.push(singleRow('daemon anonymous RSS, same moment', 'MiB', memUp.anonMiB, memOurs.anonMiB));
    rows.push(...(await pluginRowsWithDaemon(plugins, confs, options.runs)));

    // A crash (SIGKILL) leaves the conflist entry and the plugin kubeconfig: the plugin is on its own.
    const watchesBoth = await openWatches(cluster);
    await stopDaemon(upstream, 'SIGKILL');
    await sleep(1000);
    const watchesOurs = await openWatches(cluster);
    await stopDaemon(ours, 'SIGKILL');
    await sleep(1000);
    const watchesNone = await openWatches(cluster);
    rows.push(singleRow('API watches held by the daemon', '', watchesBoth - watchesOurs, watchesOurs - watchesNone));

    rows.push(...(await noDaemonRows(plugins, confs, options.runs)), ...sizeRows());
    printRows(rows);
  } finally {
    for (const p of peers) await stopDaemon(p, 'SIGTERM');
    await cluster?.stop();
    for (const p of peers) rmSync(p.dir, { recursive: true, force: true });
    rmSync(seaDir, { recursive: true, force: true });
  }
}
