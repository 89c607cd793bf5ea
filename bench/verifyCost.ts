/**
 * What continuous verification costs the running agent: `dist/install-cni` (fake API) with 110
 * pods captured through the built plugin, sidecar (pods in netns of the host's netns, default
 * sidecar rules) and ambient (a scratch node netns, in-pod rules, probe set, a fake ztunnel), its
 * CPU (process + the commands it ran, /proc/<pid>/stat; the commands' share apart) and RSS sampled
 * every SAMPLE_S over DURATION_S from the moment the last pod is captured. Each mode runs three
 * agents side by side over the same window, one at VERIFY_INTERVAL=60s (the default) and two with
 * verification off (0), so machine load hits all alike: the difference is what verification costs,
 * and the two without it show how far identical agents drift apart (the noise). The window includes
 * the first pass (every pod read once) and the steady state after it. At the end: where each agent's
 * memory is (V8's heap spaces, external memory, anonymous and file-backed RSS) and the daemon's heap
 * trims (HEAP_TRIM_INTERVAL).
 *
 * Part of `make bench` (both modes at once, 10 minutes; VERIFY_COST=0 leaves it out). Alone, as root
 * after `make build`: `node bench/verifyCost.ts` (MODES=sidecar,ambient; PODS=110; DURATION_S=600;
 * SAMPLE_S=60; FORCE_IPTABLES_BINARY / NATIVE_NFTABLES passed to the agents; PARALLEL=1 runs the modes
 * at the same time; INTERVALS=60s,0,0 the agents, each `interval` or `interval|SETTING=value|…`, e.g.
 * `60s|HEAP_TRIM_INTERVAL=0` for an agent without the heap trims).
 */
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { namespaceObject, sidecarPod } from '../test/support/meshPods.ts';
import { startAgentRig } from '../test/support/startAgentRig.ts';
import { readRssKiB } from '../test/support/watchPeakRss.ts';
import { enrolAmbientPods, startAmbientBenchNode } from './ambient.ts';
import { freshNetns } from './applySidecarRules.ts';
import { processCpuSplitMs } from './measure.ts';

type Mode = 'sidecar' | 'ambient';

export interface VerifyCostRun {
  mode: Mode;
  verifyInterval: string;
  pods: number;
  durationS: number;
  /** Agent CPU (ms, with its commands) in each sample period, in order. */
  periodsMs: number[];
  /** Of which its commands' (cutime + cstime), per period. */
  commandsMs: number[];
  /** RSS at the end of each period. */
  rssKiB: (number | undefined)[];
  totalMs: number;
  rssBeforeKiB: number | undefined;
  rssAfterKiB: number | undefined;
  /** Where the memory is at the end: V8's heap spaces (committed), external memory, anonymous RSS. */
  memoryAfter: Record<string, number>;
  /** The daemon's heap trims during the window: MiB committed before → after, and ms. */
  trims: string[];
}

/** At the end of the window: committed and used bytes per V8 heap space, external memory, and the kernel's split of RSS (MiB). */
async function memoryBreakdown(agent: CapturedAgent): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const text = await agent.metrics();
  for (const m of text.matchAll(/^nodejs_heap_space_size_(total|used)_bytes\{space="(\w+)"\} (\S+)$/gm)) {
    out[`${m[2]} ${m[1]}`] = Number(m[3]) / 1048576;
  }
  const external = /^nodejs_external_memory_bytes (\S+)$/m.exec(text);
  if (external) out.external = Number(external[1]) / 1048576;
  try {
    const rollup = readFileSync(`/proc/${agent.pid}/smaps_rollup`, 'utf8');
    for (const key of ['Rss', 'Anonymous', 'Private_Clean', 'Private_Dirty', 'Shared_Clean']) {
      const m = new RegExp(`^${key}:\\s+(\\d+) kB$`, 'm').exec(rollup);
      if (m) out[`smaps ${key}`] = Number(m[1]) / 1024;
    }
    // By mapping: malloc's main arena ([heap]), koffi (the FFI the generation reads load), other anonymous.
    const byMapping = { '[heap]': 0, koffi: 0, 'anonymous mappings': 0 };
    let bucket: keyof typeof byMapping | undefined;
    for (const line of readFileSync(`/proc/${agent.pid}/smaps`, 'utf8').split('\n')) {
      const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
      if (header) {
        const name = header[1] ?? '';
        bucket = name === '[heap]' ? '[heap]' : name.includes('koffi') ? 'koffi' : name === '' ? 'anonymous mappings' : undefined;
      }
      const m = /^Rss:\s+(\d+) kB$/.exec(line);
      if (m && bucket !== undefined) byMapping[bucket] += Number(m[1]);
    }
    for (const [k, kib] of Object.entries(byMapping)) out[`smaps ${k}`] = kib / 1024;
  } catch {
    // gone
  }
  return out;
}

/** A running agent with `pods` pods captured; `close` stops it and removes what the pods used. */
interface CapturedAgent {
  pid: number;
  /** The agent's Prometheus text. */
  metrics(): Promise<string>;
  /** Its `heap trimmed` log entries so far. */
  trims(): Record<string, unknown>[];
  close(): Promise<void>;
}

async function sidecarAgent(env: Record<string, string>, pods: number): Promise<CapturedAgent> {
  const rig = await startAgentRig(env);
  const namespaces: { remove: () => void }[] = [];
  const close = async () => {
    await rig.close();
    for (const ns of namespaces) ns.remove();
  };
  try {
    rig.api.upsertNamespace(namespaceObject('default'));
    for (let i = 0; i < pods; i++) {
      const ns = freshNetns();
      namespaces.push(ns);
      const pod = sidecarPod('default', `cost-${i}`);
      rig.api.upsertPod(pod);
      const res = await rig.exec('ADD', pod, { netns: ns.path, containerId: `cost${i}`, address: '10.1.0.5/24' });
      if (res.code !== 0) throw new Error(`ADD cost-${i}: ${res.stdout}${res.stderr}`);
    }
    const pid = rig.daemon.child.pid;
    if (pid === undefined) throw new Error('the agent has no pid');
    const port = rig.daemon.monitoringPort;
    const metrics = async () => (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const trims = () => rig.daemon.entries.filter((e) => e.msg === 'heap trimmed');
    return { pid, metrics, trims, close };
  } catch (err) {
    await close();
    throw err;
  }
}

async function ambientAgent(env: Record<string, string>, pods: number): Promise<CapturedAgent> {
  const bench = await startAmbientBenchNode(env);
  try {
    await enrolAmbientPods(bench, 0, pods);
    const decided = bench.rig.daemon.logged((e) => e.msg === 'iptables backend')[0];
    console.log(
      `(ambient agent, ${env.VERIFY_INTERVAL ?? ''}: ${decided ? `iptables backend ${String(decided.backend)}` : 'native nftables'})`,
    );
    const pid = bench.rig.daemon.child.pid;
    if (pid === undefined) throw new Error('the agent has no pid');
    const metrics = async () => (await bench.rig.get('metrics', '/metrics')).body;
    const trims = () => bench.rig.daemon.logged((e) => e.msg === 'heap trimmed');
    return { pid, metrics, trims, close: bench.close };
  } catch (err) {
    await bench.close();
    throw err;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sampleCpu(
  agent: CapturedAgent,
  durationS: number,
  sampleS: number,
): Promise<Omit<VerifyCostRun, 'mode' | 'verifyInterval' | 'pods'>> {
  const rssBeforeKiB = readRssKiB(agent.pid);
  const trimsBefore = agent.trims().length;
  const start = processCpuSplitMs(agent.pid);
  const periodsMs: number[] = [];
  const commandsMs: number[] = [];
  const rssKiB: (number | undefined)[] = [];
  let last = start;
  for (let elapsed = 0; elapsed < durationS; elapsed += sampleS) {
    await sleep(Math.min(sampleS, durationS - elapsed) * 1000);
    const now = processCpuSplitMs(agent.pid);
    periodsMs.push(now.ownMs + now.commandsMs - last.ownMs - last.commandsMs);
    commandsMs.push(now.commandsMs - last.commandsMs);
    rssKiB.push(readRssKiB(agent.pid));
    last = now;
  }
  const totalMs = last.ownMs + last.commandsMs - start.ownMs - start.commandsMs;
  const memoryAfter = await memoryBreakdown(agent);
  const trims = agent
    .trims()
    .slice(trimsBefore)
    .map((t) => `${String(t.committedMiB)} → ${String(t.afterMiB)} MiB in ${String(t.ms)} ms`);
  return { durationS, periodsMs, commandsMs, rssKiB, totalMs, rssBeforeKiB, rssAfterKiB: readRssKiB(agent.pid), memoryAfter, trims };
}

/** The agents of one mode (verification at 60 s, and twice off), captured first, then sampled over the same window. */
export async function benchVerifyCost(
  mode: Mode,
  options: { pods: number; durationS: number; sampleS: number; env?: Record<string, string>; intervals?: string[] },
): Promise<VerifyCostRun[]> {
  const intervals = options.intervals ?? ['60s', '0', '0'];
  const start = mode === 'sidecar' ? sidecarAgent : ambientAgent;
  const agents: CapturedAgent[] = [];
  try {
    for (const interval of intervals) {
      // `60s|HEAP_TRIM_INTERVAL=0`: an interval, then settings of that agent alone.
      const [verifyInterval = '', ...extra] = interval.split('|');
      const env: Record<string, string> = { ...options.env, VERIFY_INTERVAL: verifyInterval };
      for (const kv of extra) env[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
      agents.push(await start(env, options.pods));
    }
    const sampled = await Promise.all(agents.map((a) => sampleCpu(a, options.durationS, options.sampleS)));
    return sampled.map((s, i) => ({ mode, verifyInterval: intervals[i] ?? '', pods: options.pods, ...s }));
  } finally {
    for (const a of agents) await a.close();
  }
}

const mib = (kib: number | undefined) => (kib === undefined ? 'n/a' : (kib / 1024).toFixed(1));
const share = (ms: number, s: number) => pct(ms / (s * 1000));

export function printVerifyCost(runs: readonly VerifyCostRun[], sampleS: number): void {
  const first = runs[0];
  if (first === undefined) return;
  console.log(`\n## Agent CPU and memory with continuous verification (${first.pods} pods, ${first.durationS} s from the last ADD)\n`);
  console.log(
    `| mode | VERIFY_INTERVAL | agent CPU ms (incl. commands) | share of one core | RSS before → after MiB | CPU ms per ${sampleS} s | of which commands | RSS MiB per ${sampleS} s |`,
  );
  console.log('|---|---|---:|---:|---:|---|---|---|');
  for (const r of runs) {
    console.log(
      `| ${r.mode} | ${r.verifyInterval} | ${r.totalMs} | ${share(r.totalMs, r.durationS)} | ${mib(r.rssBeforeKiB)} → ${mib(r.rssAfterKiB)} | ${r.periodsMs.join(', ')} | ${r.commandsMs.join(', ')} | ${r.rssKiB.map(mib).join(', ')} |`,
    );
  }
  console.log('');
  for (const r of runs) {
    console.log(
      `${r.mode} ${r.verifyInterval}: ${r.trims.length} heap trim(s) in the window${r.trims.length > 0 ? ` (${r.trims.join('; ')})` : ''}`,
    );
  }
  const keys = [...new Set(runs.flatMap((r) => Object.keys(r.memoryAfter)))].filter((k) =>
    runs.some((r) => (r.memoryAfter[k] ?? 0) >= 0.005),
  );
  console.log(`\n| memory at the end, MiB | ${runs.map((r) => `${r.mode} ${r.verifyInterval}`).join(' | ')} |`);
  console.log(`|---|${runs.map(() => '---:').join('|')}|`);
  for (const k of keys) console.log(`| ${k} | ${runs.map((r) => r.memoryAfter[k]?.toFixed(2) ?? 'n/a').join(' | ')} |`);
  for (const mode of new Set(runs.map((r) => r.mode))) {
    const on = runs.find((r) => r.mode === mode && r.verifyInterval === '60s');
    const offs = runs.filter((r) => r.mode === mode && r.verifyInterval === '0');
    const off = offs[0];
    if (on === undefined || off === undefined) continue;
    // Past the first period (the first pass reads every pod): the steady state.
    const steadyOn = on.periodsMs.slice(1).reduce((a, b) => a + b, 0);
    const steadyOff = off.periodsMs.slice(1).reduce((a, b) => a + b, 0);
    const steadyS = Math.max(0, on.durationS - sampleS);
    const whole = (on.totalMs - off.totalMs) / (on.durationS * 1000);
    console.log(
      `\n${mode}: verification costs ${pct(whole)} of one core over the whole window` +
        (steadyS > 0 ? `, ${pct((steadyOn - steadyOff) / (steadyS * 1000))} after the first ${sampleS} s` : '') +
        ` (target ≤ 1 %: ${whole <= 0.01 ? 'met' : 'NOT met'})`,
    );
    const level = secondHalfMeanMiB(on);
    const offLevels = offs.map(secondHalfMeanMiB);
    const offMean = offLevels.reduce((a, b) => a + b, 0) / offLevels.length;
    const noise = Math.max(...offLevels) - Math.min(...offLevels);
    console.log(
      `${mode}: RSS over the second half of the window, mean: ${level.toFixed(1)} MiB with verification, ` +
        `${offLevels.map((l) => l.toFixed(1)).join(' and ')} without; verification ${signed(level - offMean)} MiB` +
        (offLevels.length > 1 ? `, two agents without it ${noise.toFixed(1)} MiB apart (the noise)` : ''),
    );
  }
}

const pct = (share: number) => `${(share * 100).toFixed(2)} %`;
const signed = (v: number) => `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(1)}`;

/** Mean RSS of the samples in the second half of the window (the first holds the first pass). */
function secondHalfMeanMiB(r: VerifyCostRun): number {
  const samples = r.rssKiB.slice(Math.floor(r.rssKiB.length / 2)).filter((k): k is number => k !== undefined);
  return samples.reduce((a, b) => a + b, 0) / Math.max(samples.length, 1) / 1024;
}

if (import.meta.main) {
  const modes = (process.env.MODES ?? 'sidecar,ambient').split(',').map((m) => {
    if (m !== 'sidecar' && m !== 'ambient') throw new Error(`MODES: unknown mode ${JSON.stringify(m)} (sidecar, ambient)`);
    return m as Mode;
  });
  const env: Record<string, string> = {};
  for (const key of ['FORCE_IPTABLES_BINARY', 'NATIVE_NFTABLES']) {
    const value = process.env[key];
    if (value !== undefined) env[key] = value;
  }
  const options = {
    pods: Number(process.env.PODS ?? 110),
    durationS: Number(process.env.DURATION_S ?? 600),
    sampleS: Number(process.env.SAMPLE_S ?? 60),
    env,
    ...(process.env.INTERVALS ? { intervals: process.env.INTERVALS.split(',') } : {}),
  };
  console.log(
    `# verification cost (${new Date().toISOString()}, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')})`,
  );
  const runMode = async (mode: Mode) => {
    const runs = await benchVerifyCost(mode, options);
    printVerifyCost(runs, options.sampleS);
    return runs;
  };
  if (process.env.PARALLEL === '1') await Promise.all(modes.map(runMode));
  else for (const mode of modes) await runMode(mode);
  console.log(
    `\n(done ${new Date().toISOString()}, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(' ')})`,
  );
}
