import { chmod, mkdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import { dirname } from 'node:path';
import { isLogLevel, RUN_DIR_MODE, type LogLevel, type LogThreshold } from '@istio-cni/handoff';

const MAX_BODY_BYTES = 4 * 1024 * 1024;
const RANK: Record<LogThreshold, number> = { debug: 0, info: 1, warn: 2, error: 3, none: 4 };
const RESERVED = new Set(['level', 'time', 'scope', 'msg']);

/**
 * One plugin log entry (upstream `cni/pkg/log/uds.go`) re-encoded under scope `cni-plugin`: the original `time` string
 * is kept as sent (nanosecond precision survives), extra keys ride along as fields. Malformed
 * entries and unknown levels give undefined.
 */
export function reencodePluginLine(entry: string, now: () => Date = () => new Date()): { level: LogLevel; line: string } | undefined {
  let v: unknown;
  try {
    v = JSON.parse(entry);
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  if (!isLogLevel(o.level)) return undefined;
  const time = typeof o.time === 'string' && o.time !== '' ? o.time : now().toISOString();
  const msg = typeof o.msg === 'string' ? o.msg.trim() : '';
  const fields: Record<string, unknown> = {};
  for (const [k, val] of Object.entries(o)) if (!RESERVED.has(k)) fields[k] = val;
  return { level: o.level, line: JSON.stringify({ level: o.level, time, scope: 'cni-plugin', msg, ...fields }) };
}

export interface LogSinkOptions {
  socketPath: string;
  /** Receives each re-encoded line (no newline); called synchronously per batch. */
  sink: (line: string) => void;
  threshold: () => LogThreshold;
}

export interface LogSinkServer {
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        resolve(undefined);
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Handles one `POST /log` body: a JSON array of encoded log lines. Returns how many were emitted. */
export function processLogBatch(body: string, o: Pick<LogSinkOptions, 'sink' | 'threshold'>): number {
  let entries: unknown;
  try {
    entries = JSON.parse(body);
  } catch {
    return 0;
  }
  if (!Array.isArray(entries)) return 0;
  const lines: string[] = [];
  const min = RANK[o.threshold()];
  for (const e of entries) {
    if (typeof e !== 'string') continue;
    const r = reencodePluginLine(e);
    if (r && RANK[r.level] >= min) lines.push(r.line);
  }
  // One synchronous loop: a batch from one plugin process is never interleaved with another's.
  for (const l of lines) o.sink(l);
  return lines.length;
}

/** The plugin log sink on `<run>/log.sock` (HTTP over a unix socket, mode 0600). */
export async function startLogSinkServer(o: LogSinkOptions): Promise<LogSinkServer> {
  await mkdir(dirname(o.socketPath), { recursive: true, mode: RUN_DIR_MODE });
  await rm(o.socketPath, { force: true });
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || (req.url ?? '').split('?')[0] !== '/log') {
      res.writeHead(404).end();
      return;
    }
    readBody(req).then(
      (body) => {
        if (body === undefined) {
          res.writeHead(413).end();
          return;
        }
        processLogBatch(body, o);
        res.writeHead(200).end();
      },
      () => res.writeHead(400).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const previous = process.umask(0o177);
    try {
      server.listen(o.socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    } finally {
      process.umask(previous);
    }
  });
  await chmod(o.socketPath, 0o600);
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }).then(() => rm(o.socketPath, { force: true })),
  };
}
