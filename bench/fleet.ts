/**
 * `make bench-scale`: many nodes, one API server. The rig's real etcd and kube-apiserver; N Node
 * objects, each with a real agent (ours: dist/install-cni; upstream's Go install-cni from
 * bench/upstream) in a network namespace of its own (upstream's readiness port is fixed), reaching
 * the API server over a veth pair; no kubelet: the bench creates pods bound to the nodes and writes
 * their status (Running, podIP) as kubelet would. One side after the other in one run, each through
 * the API server alone (the baseline), cold start (all agents at once, to all ready), steady state
 * with pod churn (one create and one delete a second cluster-wide), an API server crash and restart
 * (to every agent watch back) and a rolling restart of the agents (the chart's maxUnavailable: 1). The
 * agents run the chart's default environment (sidecar mode, repair on). Per phase: the API server's CPU and
 * RSS (from /proc), requests by verb and resource, open watches and bytes sent (its /metrics), and
 * the agents' RSS and CPU (from /proc).
 *
 * Settings (environment): FLEET_NODES (100), FLEET_PODS_PER_NODE (30), FLEET_CHURN_S (300),
 * FLEET_ROLL_UNAVAILABLE (1), FLEET_SIDES (`upstream,ours`, in that order), FLEET_SAMPLE_MS (2000),
 * PEER_OURS_DIST (another build of ours), BENCH_CACHE (upstream's binaries), E2E_CACHE (the rig),
 * FLEET_KEEP_LOGS=DIR (copies every agent's log there).
 * FLEET_RESULT_JSON=FILE also writes the figures as JSON. Needs root (network namespaces).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_MANIFEST, findObject, parseManifest, RELEASE_NAMESPACE } from '../test/e2e/support/chart.ts';
import { startCluster, type Cluster } from '../test/e2e/support/cluster.ts';
import {
  addCounts,
  descendants,
  formatPhaseTable,
  peakRate,
  rates,
  reduceScrape,
  requestDelta,
  statCpuTicks,
  statParentPid,
  statusRssKiB,
  totalRequests,
  watchGrowth,
  type ApiScrape,
  type PhaseFigures,
} from './fleetMetrics.ts';
import {
  BENCH_CACHE,
  chartEnvironment,
  createRunningPod,
  inParallel,
  makePeer,
  readyzStatus,
  stopDaemon,
  type BenchPod,
  type Peer,
  type Side,
} from './upstreamPeer.ts';

const int = (name: string, fallback: number) => {
  const v = process.env[name];
  return v === undefined || v === '' ? fallback : Number.parseInt(v, 10);
};
const NODES = int('FLEET_NODES', 100);
const PODS_PER_NODE = int('FLEET_PODS_PER_NODE', 30);
const CHURN_S = int('FLEET_CHURN_S', 300);
const ROLL_UNAVAILABLE = Math.max(1, int('FLEET_ROLL_UNAVAILABLE', 1));
const SAMPLE_MS = int('FLEET_SAMPLE_MS', 2000);
const SIDES = (process.env.FLEET_SIDES ?? 'upstream,ours').split(',').filter((s): s is Side => s === 'upstream' || s === 'ours');
const DIST = process.env.PEER_OURS_DIST;
const KERNEL_LOCK = '/var/tmp/kernel-tests.lock';
/** Every agent has a netns of its own, so both sides use upstream's fixed readiness port. */
const READINESS_PORT = 8000;
const MONITORING_PORT = 15014;
const CTRLZ_PORT = 9876;
/** The name the agents reach the API server by: in its serving certificate, mapped per netns. */
const API_HOSTNAME = 'kubernetes';
const READY_TIMEOUT_MS = 15 * 60_000;
const NAMESPACES_PER_KIND = 4;
const KINDS = ['sidecar', 'ambient', 'plain'] as const;
const IDLE_S = 20;
const PHASES = [
  `no agents: the API server alone (${IDLE_S} s, the baseline)`,
  'cold start (all agents at once)',
  `pod churn (${CHURN_S} s, 1 create + 1 delete /s)`,
  'API server restart',
  `rolling restart of all agents (maxUnavailable ${ROLL_UNAVAILABLE})`,
] as const;
const CLK_TCK = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${msg}`);

interface FleetNode {
  index: number;
  name: string;
  netns: string;
  hostIp: string;
  nodeIp: string;
}

function fleetNode(index: number): FleetNode {
  const base = index * 4;
  const prefix = `10.251.${(base >> 8) & 255}`;
  return {
    index,
    name: `fleet-node-${index}`,
    netns: `istio-cni-fleet-${index}`,
    hostIp: `${prefix}.${(base & 255) + 1}`,
    nodeIp: `${prefix}.${(base & 255) + 2}`,
  };
}

function ipUnderLock(args: string[], batch?: string): void {
  const r = spawnSync('flock', [KERNEL_LOCK, 'ip', ...args], { input: batch, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
}

/** A netns per node with a veth pair to the host, and an /etc/netns hosts file naming the API server. */
function addNetworks(nodes: FleetNode[]): void {
  const host = nodes.flatMap((n) => [
    `netns add ${n.netns}`,
    `link add fleet${n.index}h type veth peer name eth0 netns ${n.netns}`,
    `addr add ${n.hostIp}/30 dev fleet${n.index}h`,
    `link set fleet${n.index}h up`,
  ]);
  ipUnderLock(['-batch', '-'], `${host.join('\n')}\n`);
  for (const n of nodes) {
    ipUnderLock(
      ['-n', n.netns, '-batch', '-'],
      `link set lo up\naddr add ${n.nodeIp}/30 dev eth0\nlink set eth0 up\nroute add default via ${n.hostIp}\n`,
    );
    mkdirSync(`/etc/netns/${n.netns}`, { recursive: true });
    writeFileSync(`/etc/netns/${n.netns}/hosts`, `127.0.0.1 localhost\n${n.hostIp} ${API_HOSTNAME}\n`);
  }
}

function removeNetworks(nodes: FleetNode[]): void {
  const present = new Set(
    spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' })
      .stdout.split('\n')
      .map((l) => l.split(' ')[0]),
  );
  const lines = nodes.filter((n) => present.has(n.netns)).map((n) => `netns del ${n.netns}`);
  if (lines.length > 0) ipUnderLock(['-batch', '-'], `${lines.join('\n')}\n`);
  for (const n of nodes) rmSync(`/etc/netns/${n.netns}`, { recursive: true, force: true });
}

/** A pid → parent map of every process, read once per sample. */
function processParents(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      parents.set(pid, statParentPid(readFileSync(`/proc/${pid}/stat`, 'utf8')));
    } catch {
      // Gone between the listing and the read.
    }
  }
  return parents;
}

/** CPU ticks and RSS of a process and its descendants (the agent's wrappers exec, so usually one). */
function treeUsage(pid: number | undefined, parents: Map<number, number>): { ticks: number; rssKiB: number } {
  if (pid === undefined) return { ticks: 0, rssKiB: 0 };
  let ticks = 0;
  let rssKiB = 0;
  for (const p of descendants(pid, parents)) {
    try {
      ticks += statCpuTicks(readFileSync(`/proc/${p}/stat`, 'utf8'));
      rssKiB += statusRssKiB(readFileSync(`/proc/${p}/status`, 'utf8')) || 0;
    } catch {
      // Exited meanwhile.
    }
  }
  return { ticks, rssKiB };
}

/** The kube-apiserver: found by its port, restarted with the same argv and environment. */
class ApiServer {
  private respawned: ChildProcess | undefined;
  /** How long the last restart's old process took to exit after the signal. */
  exitedAfterMs = 0;
  private readonly cluster: Cluster;
  private readonly logFile: string;
  constructor(cluster: Cluster, logFile: string) {
    this.cluster = cluster;
    this.logFile = logFile;
  }

  pid(): number | undefined {
    if (this.respawned?.pid !== undefined && this.respawned.exitCode === null) return this.respawned.pid;
    const flag = `--secure-port=${this.cluster.port}`;
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
        if (argv[0]?.endsWith('kube-apiserver') && argv.includes(flag)) return Number(entry);
      } catch {
        // Gone.
      }
    }
    return undefined;
  }

  async scrape(): Promise<ApiScrape | undefined> {
    try {
      const res = await this.cluster.api.request('GET', '/metrics', undefined, { timeoutMs: 10_000 });
      return res.status === 200 ? reduceScrape(res.text) : undefined;
    } catch {
      return undefined;
    }
  }

  /** SIGKILL, then the same command again; resolves once it answers /readyz. */
  async restart(): Promise<{ readyAtMs: number }> {
    const pid = this.pid();
    if (pid === undefined) throw new Error('kube-apiserver not found');
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    const env: Record<string, string> = {};
    for (const kv of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean)) {
      const eq = kv.indexOf('=');
      env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    const signalled = Date.now();
    // Killed, as in a crash: a graceful stop waits a full minute for the open watches to drain.
    process.kill(pid, 'SIGKILL');
    const deadline = Date.now() + 60_000;
    while (existsSync(`/proc/${pid}/cmdline`) && readFileSync(`/proc/${pid}/cmdline`, 'utf8') !== '' && Date.now() < deadline)
      await sleep(50);
    this.exitedAfterMs = Date.now() - signalled;
    const fd = openSync(this.logFile, 'a');
    this.respawned = spawn(argv[0] as string, argv.slice(1), { env, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    while (Date.now() < deadline + 120_000) {
      try {
        if ((await this.cluster.api.request('GET', '/readyz', undefined, { timeoutMs: 2000 })).status === 200)
          return { readyAtMs: Date.now() };
      } catch {
        // Not listening yet.
      }
      if (this.respawned.exitCode !== null) throw new Error(`restarted kube-apiserver exited ${this.respawned.exitCode}`);
      await sleep(100);
    }
    throw new Error('restarted kube-apiserver never became ready');
  }

  async stopRespawned(): Promise<void> {
    const child = this.respawned;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await new Promise((r) => child.once('exit', r));
    clearTimeout(timer);
  }
}

/**
 * One phase's figures: samples the API server (/metrics and /proc) and the agents (/proc) every
 * SAMPLE_MS. A phase the API server restarts in is measured in two segments (`serverRestarting`,
 * `serverRestarted`); an agent restarted in the phase hands its CPU so far over (`agentRestarting`).
 */
class PhaseMeter {
  private requests: Record<string, number> = {};
  private before: ApiScrape | undefined;
  private apiTicksBase = 0;
  private apiTicks = 0;
  private responseBytes = 0;
  private watchEventBytes = 0;
  private agentBase = new Map<Peer, number>();
  private agentTicks = 0;
  private apiPeakRssKiB = 0;
  private agentMaxRssKiB = 0;
  private agentLastRssKiB = new Map<Peer, number>();
  private rate: { atMs: number; value: number }[] = [];
  private watchesPeak = 0;
  private lastWatches = 0;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();
  private startedAt = 0;

  private readonly api: ApiServer;
  private readonly agents: Peer[];
  /** The API server's own open watches (before any agent started), left out of the agents'. */
  private readonly ownWatches: number;
  constructor(api: ApiServer, agents: Peer[], ownWatches: number) {
    this.api = api;
    this.agents = agents;
    this.ownWatches = ownWatches;
  }

  async begin(): Promise<void> {
    this.startedAt = Date.now();
    const parents = processParents();
    for (const a of this.agents) this.agentBase.set(a, treeUsage(a.child?.pid, parents).ticks);
    await this.segmentStart(false);
    this.timer = setInterval(() => {
      this.sampling = this.sampling.then(() => this.sample());
    }, SAMPLE_MS);
  }

  private async segmentStart(fresh: boolean): Promise<void> {
    const pid = this.api.pid();
    this.apiTicksBase = fresh || pid === undefined ? 0 : treeUsage(pid, new Map()).ticks;
    this.before = fresh
      ? { requests: {}, watches: 0, watchesByResource: {}, registeredWatchers: 0, responseBytes: 0, watchEventBytes: 0 }
      : await this.api.scrape();
  }

  private async segmentEnd(): Promise<void> {
    const after = await this.api.scrape();
    const pid = this.api.pid();
    if (pid !== undefined) this.apiTicks += treeUsage(pid, new Map()).ticks - this.apiTicksBase;
    if (after !== undefined && this.before !== undefined) {
      this.requests = addCounts(this.requests, requestDelta(this.before.requests, after.requests));
      this.responseBytes += Math.max(0, after.responseBytes - this.before.responseBytes);
      this.watchEventBytes += Math.max(0, after.watchEventBytes - this.before.watchEventBytes);
      this.lastWatches = after.watches;
    }
  }

  serverRestarting(): Promise<void> {
    return this.sampling.then(() => this.segmentEnd());
  }

  serverRestarted(): Promise<void> {
    return this.segmentStart(true);
  }

  agentRestarting(agent: Peer): void {
    const now = treeUsage(agent.child?.pid, processParents()).ticks;
    this.agentTicks += now - (this.agentBase.get(agent) ?? 0);
    this.agentBase.set(agent, 0);
  }

  private async sample(): Promise<void> {
    const at = Date.now();
    const scrape = await this.api.scrape();
    if (scrape !== undefined) {
      this.rate.push({ atMs: at, value: totalRequests(scrape) });
      this.watchesPeak = Math.max(this.watchesPeak, scrape.watches);
    } else {
      // The server is down: the next sample's counters start again from zero.
      this.rate.push({ atMs: at, value: 0 });
    }
    const pid = this.api.pid();
    if (pid !== undefined) {
      try {
        this.apiPeakRssKiB = Math.max(this.apiPeakRssKiB, statusRssKiB(readFileSync(`/proc/${pid}/status`, 'utf8')));
      } catch {
        // Restarting.
      }
    }
    const parents = processParents();
    for (const a of this.agents) {
      const rss = treeUsage(a.child?.pid, parents).rssKiB;
      if (rss > 0) this.agentLastRssKiB.set(a, rss);
      this.agentMaxRssKiB = Math.max(this.agentMaxRssKiB, rss);
    }
  }

  async end(settleS?: number): Promise<PhaseFigures> {
    clearInterval(this.timer);
    await this.sampling;
    await this.sample();
    await this.segmentEnd();
    const parents = processParents();
    for (const a of this.agents) this.agentTicks += treeUsage(a.child?.pid, parents).ticks - (this.agentBase.get(a) ?? 0);
    const rss = [...this.agentLastRssKiB.values()];
    const figures: PhaseFigures = {
      wallS: (Date.now() - this.startedAt) / 1000,
      ...(settleS === undefined ? {} : { settleS }),
      apiCpuS: this.apiTicks / CLK_TCK,
      apiPeakRssMiB: this.apiPeakRssKiB / 1024,
      requests: this.requests,
      peakRequestsPerS: peakRate(this.rate),
      requestRates: rates(this.rate).map((r) => Math.round(r)),
      watchesEnd: this.lastWatches - this.ownWatches,
      watchesPeak: Math.max(this.watchesPeak, this.lastWatches) - this.ownWatches,
      responseMiB: this.responseBytes / 2 ** 20,
      watchEventMiB: this.watchEventBytes / 2 ** 20,
      agentMeanRssMiB: rss.length === 0 ? Number.NaN : rss.reduce((a, b) => a + b, 0) / rss.length / 1024,
      agentMaxRssMiB: this.agentMaxRssKiB / 1024,
      agentCpuS: this.agentTicks / CLK_TCK / this.agents.length,
    };
    return figures;
  }
}

async function waitReady(agents: { peer: Peer; node: FleetNode }[], label: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  const pending = new Set(agents);
  while (pending.size > 0) {
    if (Date.now() > deadline) throw new Error(`${label}: ${pending.size} agents not ready after ${READY_TIMEOUT_MS / 1000} s`);
    await Promise.all(
      [...pending].map(async (a) => {
        const child = a.peer.child;
        if (child === undefined || child.exitCode !== null) {
          const tail = readFileSync(join(a.peer.dir, 'install-cni.log'), 'utf8').split('\n').slice(-20).join('\n');
          throw new Error(`${label}: the agent of ${a.node.name} exited (${child?.exitCode}):\n${tail}`);
        }
        if ((await readyzStatus(READINESS_PORT, a.node.nodeIp)) === 200) pending.delete(a);
      }),
    );
    if (pending.size > 0) await sleep(250);
  }
}

let podSerial = 0;
function podIp(serial: number): string {
  return `10.${64 + ((serial >> 16) & 63)}.${(serial >> 8) & 255}.${serial & 255}`;
}

function benchPod(node: FleetNode, slot: number): BenchPod {
  const serial = podSerial++;
  const kind = KINDS[slot % KINDS.length] as (typeof KINDS)[number];
  return {
    name: `${node.name}-${serial}`,
    namespace: `${kind}-${slot % NAMESPACES_PER_KIND}`,
    nodeName: node.name,
    podIP: podIp(serial),
    meshed: kind === 'sidecar',
    labels: { app: `app-${slot % 10}` },
  };
}

async function setUpCluster(cluster: Cluster, nodes: FleetNode[]): Promise<BenchPod[]> {
  for (const kind of KINDS) {
    for (let i = 0; i < NAMESPACES_PER_KIND; i++) {
      const labels: Record<string, string> =
        kind === 'sidecar' ? { 'istio-injection': 'enabled' } : kind === 'ambient' ? { 'istio.io/dataplane-mode': 'ambient' } : {};
      await cluster.ensureNamespace(`${kind}-${i}`, labels);
    }
  }
  await cluster.ensureNamespace(RELEASE_NAMESPACE);
  // The DaemonSet itself: an agent stopped with it in place leaves the node's CNI config (an update, not an uninstall).
  const ds = findObject(parseManifest(readFileSync(DEFAULT_MANIFEST, 'utf8')), 'DaemonSet', 'istio-cni-node') as Record<string, unknown>;
  await cluster.api.must('POST', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets`, ds);
  await inParallel(nodes, 8, async (n) => {
    await cluster.api.must('POST', '/api/v1/nodes', {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: n.name, labels: { 'kubernetes.io/hostname': n.name, 'kubernetes.io/os': 'linux' } },
    });
  });
  const pods = nodes.flatMap((n) => Array.from({ length: PODS_PER_NODE }, (_, slot) => benchPod(n, slot)));
  await inParallel(pods, 16, (pod) => createRunningPod(cluster, pod));
  return pods;
}

/** One pod created (on the next node round robin) and the oldest deleted every second, cluster-wide. */
async function churn(cluster: Cluster, nodes: FleetNode[], pods: BenchPod[], seconds: number): Promise<void> {
  const start = Date.now();
  for (let tick = 0; tick < seconds; tick++) {
    const node = nodes[tick % nodes.length] as FleetNode;
    const fresh = benchPod(node, podSerial % PODS_PER_NODE);
    const gone = pods.shift();
    await Promise.all([
      createRunningPod(cluster, fresh),
      gone === undefined
        ? Promise.resolve()
        : cluster.api.must('DELETE', `/api/v1/namespaces/${gone.namespace}/pods/${gone.name}?gracePeriodSeconds=0`),
    ]);
    pods.push(fresh);
    await sleep(Math.max(0, start + (tick + 1) * 1000 - Date.now()));
  }
}

interface SideResult {
  side: Side;
  phases: PhaseFigures[];
  /** API requests per second, every sample of the API server restart phase. */
}

async function runSide(side: Side, cluster: Cluster, api: ApiServer, nodes: FleetNode[], pods: BenchPod[]): Promise<SideResult> {
  const chart = chartEnvironment();
  const target = { ...cluster, host: API_HOSTNAME } as Cluster;
  const agents = nodes.map((node) => {
    const env = { ...chart.env, NODE_NAME: node.name, REPAIR_NODE_NAME: node.name, POD_NAME: `istio-cni-node-${node.index}` };
    const ours = { dist: DIST ?? join(import.meta.dirname, '../dist'), label: `fleet-ours-${node.index}` };
    const peer = makePeer(side, target, { env, args: chart.args }, READINESS_PORT, MONITORING_PORT, CTRLZ_PORT, ours, [
      'ip',
      'netns',
      'exec',
      node.netns,
    ]);
    return { peer, node };
  });
  const peers = agents.map((a) => a.peer);
  const own = await api.scrape();
  if (own === undefined) throw new Error('no /metrics from the API server');
  const meter = () => new PhaseMeter(api, peers, own.watches);
  const phases: PhaseFigures[] = [];
  try {
    let m = meter();
    await m.begin();
    await sleep(IDLE_S * 1000);
    phases.push(await m.end());
    log(`${side}: cold start of ${agents.length} agents`);
    m = meter();
    await m.begin();
    const t0 = Date.now();
    for (const p of peers) p.spawnDaemon();
    await waitReady(agents, `${side} cold start`);
    const readyS = (Date.now() - t0) / 1000;
    phases.push(await m.end(readyS));
    log(`${side}: all ready in ${readyS.toFixed(1)} s; churn for ${CHURN_S} s`);

    m = meter();
    await m.begin();
    await churn(cluster, nodes, pods, CHURN_S);
    phases.push(await m.end());

    const beforeRestart = await api.scrape();
    // What the agents watch: the resources whose watches grew when they started.
    const agentWatches = watchGrowth(own.watchesByResource, beforeRestart?.watchesByResource ?? {});
    const expected = Object.fromEntries(Object.keys(agentWatches).map((r) => [r, beforeRestart?.watchesByResource[r] ?? 0]));
    log(`${side}: API server restart (agents' watches: ${JSON.stringify(agentWatches)})`);
    m = meter();
    await m.begin();
    await sleep(SAMPLE_MS * 2);
    await m.serverRestarting();
    const killedAt = Date.now();
    const { readyAtMs } = await api.restart();
    log(
      `${side}: API server exited ${(api.exitedAfterMs / 1000).toFixed(1)} s after SIGKILL, ready again ${((readyAtMs - killedAt) / 1000).toFixed(1)} s after it`,
    );
    await m.serverRestarted();
    const deadline = Date.now() + READY_TIMEOUT_MS;
    const back = (open: Record<string, number>) => Object.entries(expected).every(([r, n]) => (open[r] ?? 0) >= n);
    let open = (await api.scrape())?.watchesByResource ?? {};
    let lastLog = Date.now();
    while (!back(open)) {
      if (Date.now() > deadline) throw new Error(`${side}: the agents' watches did not come back after the API server restart`);
      if (Date.now() - lastLog > 10_000) {
        log(`${side}: open watches ${JSON.stringify(open)}, waiting for ${JSON.stringify(expected)}`);
        lastLog = Date.now();
      }
      await sleep(200);
      open = (await api.scrape())?.watchesByResource ?? {};
    }
    const resyncS = (Date.now() - readyAtMs) / 1000;
    log(`${side}: the agents' watches are back ${resyncS.toFixed(1)} s after the API server was ready again`);
    // What follows a restart (re-lists after a too-old resourceVersion, relist backoff) belongs to it too.
    await sleep(15_000);
    await waitReady(agents, `${side} after the API server restart`);
    phases.push(await m.end(resyncS));

    log(`${side}: rolling restart`);
    m = meter();
    await m.begin();
    for (let i = 0; i < agents.length; i += ROLL_UNAVAILABLE) {
      const batch = agents.slice(i, i + ROLL_UNAVAILABLE);
      await Promise.all(
        batch.map(async (a) => {
          m.agentRestarting(a.peer);
          await stopDaemon(a.peer, 'SIGTERM');
          a.peer.spawnDaemon();
        }),
      );
      await waitReady(batch, `${side} rolling restart`);
    }
    phases.push(await m.end());
    log(`${side}: done`);
    return { side, phases };
  } finally {
    await Promise.all(peers.map((p) => stopDaemon(p, 'SIGKILL')));
    const keep = process.env.FLEET_KEEP_LOGS;
    if (keep !== undefined) mkdirSync(keep, { recursive: true });
    for (const [i, p] of peers.entries()) {
      if (keep !== undefined) copyFileSync(join(p.dir, 'install-cni.log'), join(keep, `${side}-${i}.log`));
      rmSync(p.dir, { recursive: true, force: true });
    }
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench-scale needs root: it gives every node a network namespace');
  for (const bin of ['install-cni', 'istio-cni']) {
    if (SIDES.includes('upstream') && !existsSync(join(BENCH_CACHE, 'bin', bin)))
      throw new Error(`${join(BENCH_CACHE, 'bin', bin)} is missing: run \`make bench-peer\` or point BENCH_CACHE at a built one`);
  }
  const nodes = Array.from({ length: NODES }, (_, i) => fleetNode(i));
  console.log(
    `# istio-cni fleet: ${NODES} nodes × ${PODS_PER_NODE} pods, sides ${SIDES.join(', ')} (${new Date().toISOString()}, Node ${process.version})`,
  );
  let cluster: Cluster | undefined;
  let api: ApiServer | undefined;
  const results: SideResult[] = [];
  const etcNetnsExisted = existsSync('/etc/netns');
  try {
    removeNetworks(nodes);
    addNetworks(nodes);
    cluster = await startCluster({ apiserverFlags: ['--bind-address=0.0.0.0'] });
    api = new ApiServer(cluster, join(cluster.dir, 'kube-apiserver.restarted.log'));
    const t0 = Date.now();
    const pods = await setUpCluster(cluster, nodes);
    log(`${pods.length} pods on ${NODES} nodes created in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    for (const side of SIDES) {
      results.push(await runSide(side, cluster, api, nodes, pods));
      await sleep(10_000);
    }
  } finally {
    await api?.stopRespawned();
    await cluster?.stop();
    removeNetworks(nodes);
    if (!etcNetnsExisted && existsSync('/etc/netns') && readdirSync('/etc/netns').length === 0) rmdirSync('/etc/netns');
  }
  const upstream = results.find((r) => r.side === 'upstream');
  const ours = results.find((r) => r.side === 'ours');
  console.log(`\n## Fleet: ${NODES} nodes, ${PODS_PER_NODE} pods each (${new Date().toISOString().slice(0, 10)})\n`);
  for (const [i, phase] of PHASES.entries()) {
    const u = upstream?.phases[i];
    const o = ours?.phases[i];
    if (u !== undefined && o !== undefined) console.log(`${formatPhaseTable(phase, u, o, NODES, Math.max(2, NODES))}\n`);
    else console.log(`### ${phase}\n\n${JSON.stringify(u ?? o)}\n`);
  }
  for (const r of results)
    console.log(
      `request rate (/s, every ${SAMPLE_MS} ms) through the API server restart, ${r.side}: ${r.phases[3]?.requestRates.join(' ')}`,
    );
  if (process.env.FLEET_RESULT_JSON)
    writeFileSync(
      process.env.FLEET_RESULT_JSON,
      `${JSON.stringify({ nodes: NODES, podsPerNode: PODS_PER_NODE, churnS: CHURN_S, results }, null, 2)}\n`,
    );
}

await main();
