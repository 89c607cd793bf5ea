import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';

export interface ManagedProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly logFile: string;
  /** The last lines of the log, for failure messages. */
  logTail(lines?: number): string;
  /** Rejects when the process has exited, so waits can race against an early crash. */
  readonly exited: Promise<never>;
  /** SIGTERM, then SIGKILL after graceMs; resolves once the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

const live = new Set<ChildProcess>();
// If the test runner dies mid-run nothing else would stop the rig; `exit` handlers must be synchronous.
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Spawns a long-running rig process whose stdout and stderr go to logFile. */
export function startManagedProcess(name: string, argv: readonly string[], logFile: string, env?: NodeJS.ProcessEnv): ManagedProcess {
  const [file, ...args] = argv;
  if (file === undefined) throw new Error(`startManagedProcess(${name}) needs a non-empty argv`);
  const fd = openSync(logFile, 'a');
  const child = spawn(file, args, { stdio: ['ignore', fd, fd], env: env ?? process.env });
  closeSync(fd);
  live.add(child);
  const logTail = (lines = 40): string => {
    try {
      return readFileSync(logFile, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  };
  const gone = new Promise<void>((resolveGone) => {
    const done = () => {
      live.delete(child);
      resolveGone();
    };
    if (child.exitCode !== null || child.signalCode !== null) done();
    child.once('exit', done);
    child.once('error', done);
  });
  const exited = gone.then((): never => {
    throw new Error(`${name} exited (code ${child.exitCode}, signal ${child.signalCode}):\n${logTail()}`);
  });
  // Nobody may be waiting on `exited`; the rejection is only information.
  exited.catch(() => {});
  return {
    name,
    child,
    logFile,
    logTail,
    exited,
    async stop(graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await gone;
      clearTimeout(timer);
    },
  };
}

/** Polls probe until it returns a value, the process dies, or timeoutMs passes. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  options: { timeoutMs?: number; intervalMs?: number; process?: ManagedProcess | undefined } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  let lastError: unknown;
  for (;;) {
    const proc = options.process;
    if (proc !== undefined && (proc.child.exitCode !== null || proc.child.signalCode !== null)) await proc.exited;
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const tail = proc === undefined ? '' : `\n${proc.name} log:\n${proc.logTail()}`;
      throw new Error(`timed out waiting for ${what}${lastError === undefined ? '' : `: ${String(lastError)}`}${tail}`);
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 200));
  }
}
