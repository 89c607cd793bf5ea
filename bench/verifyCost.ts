/**
 * What continuous verification costs the running agent: `dist/install-cni` (fake API) with 110
 * pods captured through the built plugin, sidecar (pods in netns of the host's netns, default
 * sidecar rules) and ambient (a scratch node netns, in-pod rules, probe set, a fake ztunnel), its
 * CPU (process + the commands it ran, /proc/<pid>/stat; the commands' share apart) and RSS sampled
 * every SAMPLE_S over DURATION_S from the moment the last pod is captured. Each mode runs two agents side
 * by side over the same window, one at VERIFY_INTERVAL=60s (the default) and one with verification
 * off (0), so machine load hits both alike; their difference is what verification costs. The
 * window includes the first pass (every pod read once) and the steady state after it.
 *
 * Not part of `make bench` (10 minutes per mode). Run alone as root after `make build`:
 * `node bench/verifyCost.ts` (MODES=sidecar,ambient; PODS=110; DURATION_S=600; SAMPLE_S=60;
 * FORCE_IPTABLES_BINARY / NATIVE_NFTABLES passed to the agents; PARALLEL=1 runs the modes at the
 * same time instead of one after the other; INTERVALS=0,0 runs two agents without verification, to
 * see how far two identical agents drift apart: the noise the difference is read against).
 */
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
}

/** A running agent with `pods` pods captured; `close` stops it and removes what the pods used. */
interface CapturedAgent {
  pid: number;
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
    return { pid, close };
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
    return { pid, close: bench.close };
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
  return { durationS, periodsMs, commandsMs, rssKiB, totalMs, rssBeforeKiB, rssAfterKiB: readRssKiB(agent.pid) };
}

/** The agents of one mode, verification at 60 s and off, captured first, then sampled over the same window. */
export async function benchVerifyCost(
  mode: Mode,
  options: { pods: number; durationS: number; sampleS: number; env?: Record<string, string>; intervals?: string[] },
): Promise<VerifyCostRun[]> {
  const intervals = options.intervals ?? ['60s', '0'];
  const start = mode === 'sidecar' ? sidecarAgent : ambientAgent;
  const agents: CapturedAgent[] = [];
  try {
    for (const interval of intervals) agents.push(await start({ ...options.env, VERIFY_INTERVAL: interval }, options.pods));
    const sampled = await Promise.all(agents.map((a) => sampleCpu(a, options.durationS, options.sampleS)));
    return sampled.map((s, i) => ({ mode, verifyInterval: intervals[i] ?? '', pods: options.pods, ...s }));
  } finally {
    for (const a of agents) await a.close();
  }
}

const mib = (kib: number | undefined) => (kib === undefined ? 'n/a' : (kib / 1024).toFixed(1));
const share = (ms: number, s: number) => `${((ms / (s * 1000)) * 100).toFixed(2)} %`;

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
  for (const mode of new Set(runs.map((r) => r.mode))) {
    const on = runs.find((r) => r.mode === mode && r.verifyInterval !== '0');
    const off = runs.find((r) => r.mode === mode && r.verifyInterval === '0');
    if (on === undefined || off === undefined) continue;
    // Past the first period (the first pass reads every pod): the steady state.
    const steadyOn = on.periodsMs.slice(1).reduce((a, b) => a + b, 0);
    const steadyOff = off.periodsMs.slice(1).reduce((a, b) => a + b, 0);
    const steadyS = Math.max(0, on.durationS - sampleS);
    console.log(
      `\n${mode}: verification costs ${share(on.totalMs - off.totalMs, on.durationS)} of one core over the whole window` +
        (steadyS > 0 ? `, ${share(steadyOn - steadyOff, steadyS)} after the first ${sampleS} s` : ''),
    );
  }
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
