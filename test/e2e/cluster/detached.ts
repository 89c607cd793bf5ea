import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import type { ProcessRecord } from './state.ts';

/** The start time (field 22 of /proc/<pid>/stat), or undefined when the process is gone or a zombie. */
export function processStartTime(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return fields[19];
}

export function isRunning(record: ProcessRecord): boolean {
  return processStartTime(record.pid) === record.startTime;
}

/** Starts a process that outlives `make up` (own session, output to logFile). */
export function startDetached(name: string, argv: readonly string[], logFile: string, stopOrder: number): ProcessRecord {
  const [file, ...args] = argv;
  if (file === undefined) throw new Error(`startDetached(${name}) needs a non-empty argv`);
  const fd = openSync(logFile, 'a');
  const child = spawn(file, args, { stdio: ['ignore', fd, fd], detached: true });
  closeSync(fd);
  const pid = child.pid;
  if (pid === undefined) throw new Error(`${name}: could not start ${file}`);
  child.unref();
  const startTime = processStartTime(pid);
  if (startTime === undefined) throw new Error(`${name} exited at once:\n${logTail(logFile)}`);
  return { name, pid, startTime, logFile, stopOrder };
}

/**
 * The record of the one child `parent` forks (unshare --fork, nsenter -p: the process that then
 * runs in the new PID namespace), waited for up to timeoutMs. Signalling the wrapper would leave
 * that child running, so the child is what is recorded and stopped.
 */
export async function forkedChild(parent: ProcessRecord, timeoutMs = 10_000): Promise<ProcessRecord> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let children: string[] = [];
    try {
      children = readFileSync(`/proc/${parent.pid}/task/${parent.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch {
      // gone: reported below
    }
    const [pid] = children.map(Number);
    const startTime = pid === undefined ? undefined : processStartTime(pid);
    if (pid !== undefined && startTime !== undefined) return { ...parent, pid, startTime };
    if (!isRunning(parent)) throw new Error(`${parent.name} exited at once:\n${logTail(parent.logFile)}`);
    if (Date.now() > deadline) throw new Error(`${parent.name} (pid ${parent.pid}) forked no child within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export function logTail(logFile: string, lines = 30): string {
  try {
    return readFileSync(logFile, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/** SIGTERM, then SIGKILL after graceMs; resolves once the process is gone. */
export async function stopDetached(record: ProcessRecord, graceMs = 10_000): Promise<void> {
  if (!isRunning(record)) return;
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(record.pid, sig);
    } catch {
      // gone meanwhile
    }
  };
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isRunning(record)) {
    if (Date.now() > deadline) {
      signal('SIGKILL');
      if (Date.now() > deadline + 5_000) throw new Error(`${record.name} (pid ${record.pid}) survived SIGKILL`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Polls probe until it returns a value; fails early with the log when the process dies. */
export async function waitForDetached<T>(
  what: string,
  record: ProcessRecord,
  probe: () => Promise<T | undefined>,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    if (!isRunning(record)) throw new Error(`${record.name} exited while waiting for ${what}:\n${logTail(record.logFile)}`);
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const cause = lastError === undefined ? '' : `: ${String(lastError)}`;
      throw new Error(`timed out waiting for ${what}${cause}\n${record.name} log (${record.logFile}):\n${logTail(record.logFile)}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}
