/**
 * Structured JSON log lines, one per event: `{"level","time","scope","msg",...fields}`.
 * The same line format travels from plugin to agent over `<run>/log.sock` (upstream `cni/pkg/log/uds.go`), so both
 * executables share it.
 */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogThreshold = LogLevel | 'none';
export type LogFields = Record<string, unknown>;

const RANK: Record<LogThreshold, number> = { debug: 0, info: 1, warn: 2, error: 3, none: 4 };

export function parseLogThreshold(value: string | undefined, fallback: LogThreshold = 'info'): LogThreshold {
  if (value === undefined || value === '') return fallback;
  const v = value.toLowerCase();
  if (v === 'warning') return 'warn';
  return v in RANK ? (v as LogThreshold) : fallback;
}

export function isLogLevel(value: unknown): value is LogLevel {
  return value === 'debug' || value === 'info' || value === 'warn' || value === 'error';
}

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line (e.g. the pod's namespace/name). */
  with(fields: LogFields): Logger;
  setThreshold(threshold: LogThreshold): void;
}

export interface JsonLoggerOptions {
  scope: string;
  threshold?: LogThreshold;
  /** Receives each encoded line without the trailing newline. */
  sink: (line: string) => void;
  now?: () => Date;
}

export function formatLogLine(level: LogLevel, scope: string, msg: string, fields: LogFields, time: Date): string {
  return JSON.stringify({ level, time: time.toISOString(), scope, msg, ...fields }, errorReplacer);
}

function errorReplacer(_key: string, value: unknown): unknown {
  return value instanceof Error ? value.message : value;
}

export function createJsonLogger(options: JsonLoggerOptions): Logger {
  const state = { threshold: options.threshold ?? ('info' as LogThreshold) };
  const now = options.now ?? (() => new Date());
  const make = (base: LogFields): Logger => {
    const emit = (level: LogLevel, msg: string, fields?: LogFields): void => {
      if (RANK[level] < RANK[state.threshold]) return;
      options.sink(formatLogLine(level, options.scope, msg, { ...base, ...fields }, now()));
    };
    return {
      debug: (m, f) => emit('debug', m, f),
      info: (m, f) => emit('info', m, f),
      warn: (m, f) => emit('warn', m, f),
      error: (m, f) => emit('error', m, f),
      with: (fields) => make({ ...base, ...fields }),
      setThreshold: (t) => {
        state.threshold = t;
      },
    };
  };
  return make({});
}
