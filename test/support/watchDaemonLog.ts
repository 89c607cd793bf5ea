import type { ChildProcess } from 'node:child_process';

export type LogEntry = Record<string, unknown>;

/** A running daemon child whose JSON log lines are collected and can be awaited. */
export interface DaemonLog {
  /** Every line the daemon wrote (stdout lines and stderr chunks), for failure messages. */
  lines: string[];
  /** The stdout lines that parsed as JSON log entries. */
  entries: LogEntry[];
  /** Resolves with the first entry (past or future) that matches; rejects on timeout or exit. */
  waitForLog(match: (entry: LogEntry) => boolean, timeoutMs?: number): Promise<LogEntry>;
  /** SIGTERM (or `signal`), then SIGKILL after `graceMs`; resolves with the exit code. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
  exited: Promise<number | null>;
}

export function watchDaemonLog(child: ChildProcess): DaemonLog {
  const lines: string[] = [];
  const entries: LogEntry[] = [];
  const waiters: { match: (e: LogEntry) => boolean; resolve: (e: LogEntry) => void }[] = [];
  let buffered = '';
  const onLine = (line: string) => {
    lines.push(line);
    let entry: LogEntry;
    try {
      entry = JSON.parse(line) as LogEntry;
    } catch {
      return;
    }
    entries.push(entry);
    for (const w of [...waiters]) {
      if (w.match(entry)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(entry);
      }
    }
  };
  child.stdout?.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      onLine(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => lines.push(chunk.toString()));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return {
    lines,
    entries,
    exited,
    waitForLog(match, timeoutMs = 15_000) {
      const seen = entries.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`daemon did not log the expected line in ${timeoutMs} ms:\n${lines.join('\n')}`)),
          timeoutMs,
        );
        waiters.push({
          match,
          resolve: (e) => {
            clearTimeout(timer);
            resolve(e);
          },
        });
        void exited.then((code) => {
          clearTimeout(timer);
          reject(new Error(`daemon exited (${code}) before logging the expected line:\n${lines.join('\n')}`));
        });
      });
    },
    async stop(signal = 'SIGTERM', graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
