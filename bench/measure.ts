import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

export interface Sample {
  name: string;
  runs: number;
  medianMs: number;
  p90Ms: number;
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

/** A run that exited non-zero; for a CNI plugin `cniCode`/`cniMessage` come from the error JSON on stdout. */
export class ProcessFailed extends Error {
  override name = 'ProcessFailed';
  readonly cniCode: number | undefined;
  readonly cniMessage: string | undefined;
  constructor(message: string, stdout: string) {
    let cni: { code?: number; msg?: string } = {};
    try {
      cni = JSON.parse(stdout) as { code?: number; msg?: string };
    } catch {
      // Not a CNI error document.
    }
    super(cni.code === undefined ? message : `${message} (CNI code ${cni.code}: ${cni.msg ?? ''})`);
    this.cniCode = cni.code;
    this.cniMessage = cni.msg;
  }
}

/** No process run by a benchmark may take longer than this (a CNI ADD has kubelet's own 4 min). */
export const PROCESS_TIMEOUT_MS = 60_000;

/**
 * Wall time of one process run, from spawn to exit, in milliseconds. Fails on a non-zero exit with
 * the CNI error it printed, and kills the process and fails when it runs past `timeoutMs`.
 */
export function timeProcess(argv: string[], env: NodeJS.ProcessEnv, stdin = '', timeoutMs = PROCESS_TIMEOUT_MS): Promise<number> {
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    const child = spawn(argv[0] as string, argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new ProcessFailed(`${argv.join(' ')} timed out after ${timeoutMs} ms: ${stderr}`, stdout));
    }, timeoutMs);
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (code === 0) resolve(ms);
      else reject(new ProcessFailed(`${argv.join(' ')} exited ${code}: ${stderr}`, stdout));
    });
    child.stdin.on('error', () => {}); // the process may exit before reading everything
    child.stdin.end(stdin);
  });
}

/** Thrown by {@link bounded} when a step runs past its time. */
export class StepTimeout extends Error {
  override name = 'StepTimeout';
}

/** Runs `fn`, failing with a message naming `step` when it has not settled after `timeoutMs`. */
export async function bounded<T>(step: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StepTimeout(`${step}: did not finish within ${timeoutMs / 1000} s`)), timeoutMs);
  });
  try {
    return await Promise.race([fn(), expired]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs each scenario `runs` times, interleaved (A B C A B C …) so that machine noise hits every
 * scenario alike, after `warmup` unmeasured rounds.
 */
export async function compare(scenarios: { name: string; run: () => Promise<number> }[], runs: number, warmup = 3): Promise<Sample[]> {
  const times = new Map<string, number[]>(scenarios.map((s) => [s.name, []]));
  for (let i = 0; i < warmup + runs; i++) {
    for (const s of scenarios) {
      const ms = await s.run();
      if (i >= warmup) times.get(s.name)?.push(ms);
    }
  }
  return scenarios.map((s) => {
    const t = times.get(s.name) ?? [];
    return { name: s.name, runs: t.length, medianMs: median(t), p90Ms: percentile(t, 90) };
  });
}

export function printTable(title: string, samples: Sample[], baseline: string): void {
  const base = samples.find((s) => s.name === baseline);
  console.log(`\n## ${title}\n`);
  console.log('| scenario | runs | median ms | p90 ms | ratio to baseline |');
  console.log('|---|---:|---:|---:|---:|');
  for (const s of samples) {
    const ratio = base ? (s.medianMs / base.medianMs).toFixed(2) : 'n/a';
    console.log(
      `| ${s.name}${s.name === baseline ? ' (baseline)' : ''} | ${s.runs} | ${s.medianMs.toFixed(1)} | ${s.p90Ms.toFixed(1)} | ${ratio} |`,
    );
  }
}

/**
 * CPU time of a process and its waited-for children in ms (utime, stime, cutime, cstime of
 * /proc/<pid>/stat): for an agent, its own work plus the commands it ran.
 */
export function processCpuMs(pid: number | 'self' = 'self'): number {
  const { ownMs, commandsMs } = processCpuSplitMs(pid);
  return ownMs + commandsMs;
}

/** The same, the process's own (utime + stime) and its waited-for children's (cutime + cstime) apart. */
export function processCpuSplitMs(pid: number | 'self' = 'self'): { ownMs: number; commandsMs: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // USER_HZ is 100 on Linux
  const ms = (indexes: number[]) => indexes.reduce((sum, i) => sum + Number(fields[i]), 0) * 10;
  return { ownMs: ms([11, 12]), commandsMs: ms([13, 14]) };
}
