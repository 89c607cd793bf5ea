import type { ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import type { Socket } from 'node:net';
import { monotonicNow, retryWithBackoff, type BackoffPolicy, type RetryDecision } from './backoff.ts';
import { projectJson } from './protobuf/messageSchema.ts';
import { bunFetchExchange, isBun, type HttpExchange } from './fetchExchange.ts';
import type { KubeCredentials } from './kubeconfigCredentials.ts';
import {
  FRAME_HEADER_BYTES,
  PROTOBUF_WATCH_ACCEPT,
  decodeStatusBody,
  decodeWatchFrame,
  isProtobufContentType,
  type ProtobufObjectType,
} from './protobuf/watchProtobuf.ts';

/**
 * A small Kubernetes REST client over node:http(s): JSON requests and watch streams, with the
 * daemon's credentials. It replaces @kubernetes/client-node, whose generated models, serializer
 * and bundled HTTP stack cost the daemon ~28 MiB of heap and ~10 MiB of mapped code at load
 * (docs/decisions.md, "Kubernetes client"), for the dozen calls the daemon makes; the plugin's degraded mode
 * uses it too. Under Bun (the plugin, scripts/build.ts) a request goes through Bun's own fetch
 * (fetchExchange.ts), and node:http(s) is loaded only for a watch, which the plugin never opens.
 */

export interface KubeRequest {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  path: string;
  query?: Readonly<Record<string, string | undefined>>;
  body?: unknown;
  /** Defaults to application/json; PATCH needs a patch type. */
  contentType?: string;
  /** One attempt's limit (capped by what is left of `deadlineMs`). */
  timeoutMs?: number;
  /**
   * Safe to send again after a transient failure (connection error, 429, 500/502/503/504): true for
   * GET; callers say so for a merge patch, a JSON patch guarded by `test` ops, an event with a
   * fixed name, a DELETE with preconditions. Either way a request that failed on a reused
   * keep-alive connection before any answer is sent again on a new one.
   */
  idempotent?: boolean;
  /** All attempts of this call end within this long. */
  deadlineMs?: number;
}

export const MERGE_PATCH = 'application/merge-patch+json';
export const JSON_PATCH = 'application/json-patch+json';

/** A non-2xx answer. `code` is the HTTP status (or the code of a watch ERROR event's Status). */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  readonly code: number;
  readonly reason: string | undefined;
  /** `Retry-After` of a 429/503, in milliseconds. */
  readonly retryAfterMs: number | undefined;
  constructor(message: string, code: number, reason?: string, retryAfterMs?: number) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
}

/** The request got no HTTP answer (refused, reset, timed out); the message names the call. */
export class KubeConnectionError extends Error {
  override name = 'KubeConnectionError';
  /** The socket came from the keep-alive pool and failed before any answer. */
  readonly staleSocket: boolean;
  constructor(message: string, cause: unknown, staleSocket: boolean) {
    super(message, { cause });
    this.staleSocket = staleSocket;
  }
}

export function isNotFound(err: unknown): boolean {
  return err instanceof KubeApiError && err.code === 404;
}

const TRANSIENT_STATUS = new Set([429, 500, 502, 503, 504]);

/** A failure that may pass by itself: no answer, or 429/500/502/503/504. 4xx answers are final. */
export function isTransientKubeError(err: unknown): boolean {
  if (err instanceof KubeConnectionError) return true;
  return err instanceof KubeApiError && TRANSIENT_STATUS.has(err.code);
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK';

export interface WatchEvent {
  type: WatchEventType;
  object: { metadata?: { name?: string; namespace?: string; resourceVersion?: string } } & Record<string, unknown>;
}

export interface WatchStream {
  /** Resolves when the server ends the stream (its timeout); rejects on errors and ERROR events. */
  done: Promise<void>;
  stop(): void;
}

export interface WatchOptions {
  /**
   * Ask for protobuf (as client-go does; a third fewer bytes than JSON) and decode only this
   * type's fields. A server that answers JSON is read as JSON, its objects projected onto the same
   * fields, so either way an event's object has the same shape.
   */
  protobuf?: ProtobufObjectType;
}

export interface KubeClient {
  request<T = unknown>(req: KubeRequest): Promise<T>;
  /** `GET path?watch=true&…`; `onEvent` is called for each event, in order. */
  watch(
    path: string,
    query: Readonly<Record<string, string | undefined>>,
    onEvent: (event: WatchEvent) => void,
    idleTimeoutMs: number,
    options?: WatchOptions,
  ): WatchStream;
}

export interface KubeClientOptions {
  userAgent?: string;
  /** Default per-attempt timeout. */
  timeoutMs?: number;
  /** Default limit of all attempts of one call. */
  deadlineMs?: number;
  /** Attempts in all for a transient failure (the first included). */
  maxAttempts?: number;
  backoff?: BackoffPolicy;
  /** Called before each retry, e.g. to log or count it. */
  onRetry?(err: Error, attempt: number, delayMs: number): void;
  /** For tests: the retry timing. */
  sleep?(ms: number): Promise<void>;
}

const DEFAULT_TIMEOUT_MS = 30_000;
/** Well inside the plugin's hand-off timeout, so an ADD answers "try again" rather than timing out. */
const DEFAULT_DEADLINE_MS = 12_000;
const DEFAULT_MAX_ATTEMPTS = 6;
const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 200, maxMs: 3_000 };
/** A stale pooled socket is retried at once, this many times (each takes a fresh one or a new connection). */
const MAX_STALE_SOCKET_RETRIES = 3;
/**
 * Idle keep-alive sockets are closed after this long: before any usual server idle limit (Go's
 * `IdleTimeout`, Node's 5 s, cloud load balancers), so a pooled socket is rarely dead on reuse.
 */
export const IDLE_SOCKET_MS = 2_000;
const STALE_SOCKET_CODES = new Set(['ECONNRESET', 'EPIPE']);
const MAX_BODY_BYTES = 64 << 20;
const MAX_WATCH_LINE_BYTES = 16 << 20;
const WATCH_EVENT_TYPES = new Set<string>(['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR']);

function queryString(query: Readonly<Record<string, string | undefined>> | undefined): string {
  if (query === undefined) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== '') params.set(k, v);
  const s = params.toString();
  return s === '' ? '' : `?${s}`;
}

/** `Retry-After` as seconds or an HTTP date, in milliseconds. */
export function parseRetryAfter(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The error of a protobuf `Status` body (an answer to a request that accepted protobuf). */
function protobufStatusError(method: string, path: string, status: number, body: Buffer): KubeApiError {
  const s = decodeStatusBody(body);
  if (s === undefined) return statusError(method, path, status, body.toString('utf8'));
  return new KubeApiError(`${method} ${path}: HTTP ${status}: ${s.message ?? ''}`, status, s.reason);
}

/** The message of a `Status` body, or the start of whatever the server sent. */
function statusError(method: string, path: string, status: number, body: string, retryAfterMs?: number): KubeApiError {
  let message = body.slice(0, 300);
  let reason: string | undefined;
  try {
    const parsed = JSON.parse(body) as { kind?: string; message?: string; reason?: string };
    if (parsed.kind === 'Status') {
      message = parsed.message ?? message;
      reason = parsed.reason;
    }
  } catch {
    // Not JSON: keep the raw text.
  }
  return new KubeApiError(`${method} ${path}: HTTP ${status}: ${message}`, status, reason, retryAfterMs);
}

/** GET of one object; `undefined` when it does not exist. */
export async function getOrUndefined<T>(client: KubeClient, path: string): Promise<T | undefined> {
  try {
    return await client.request<T>({ method: 'GET', path });
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export function createKubeClient(creds: KubeCredentials, options: KubeClientOptions = {}): KubeClient {
  const secure = creds.server.protocol === 'https:';
  const tls = secure
    ? {
        ...(creds.ca ? { ca: creds.ca } : {}),
        ...(creds.clientCert ? { cert: creds.clientCert } : {}),
        ...(creds.clientKey ? { key: creds.clientKey } : {}),
        ...(creds.tlsServerName ? { servername: creds.tlsServerName } : {}),
        rejectUnauthorized: !creds.insecureSkipTlsVerify,
      }
    : {};
  const base = creds.server.pathname.replace(/\/+$/, '');
  const userAgent = options.userAgent ?? 'istio-cni';
  let node: { send: (opts: RequestOptions) => ClientRequest; agent: RequestOptions['agent'] } | undefined;

  /** node:http(s) and the keep-alive pool, on first use (under Bun: never, for a request). */
  function nodeHttp(): NonNullable<typeof node> {
    if (node !== undefined) return node;
    const http = process.getBuiltinModule('node:http');
    const https = process.getBuiltinModule('node:https');
    const agent = secure
      ? new https.Agent({ keepAlive: true, maxFreeSockets: 4, ...tls })
      : new http.Agent({ keepAlive: true, maxFreeSockets: 4 });
    // Node sets a pooled socket's idle timeout from the server's `Keep-Alive: timeout=N` hint (less a
    // second) or leaves none; ours is shorter either way, and the agent destroys a free socket on it.
    const pool = agent as unknown as { keepSocketAlive(socket: Socket): boolean };
    const keepSocketAlive = pool.keepSocketAlive.bind(agent);
    pool.keepSocketAlive = (socket) => {
      const keep = keepSocketAlive(socket);
      if (keep) socket.setTimeout(IDLE_SOCKET_MS);
      return keep;
    };
    node = { send: secure ? https.request : http.request, agent };
    return node;
  }

  function open(method: string, path: string, headers: Readonly<Record<string, string>>, timeoutMs: number): ClientRequest {
    const token = creds.token();
    const { send, agent } = nodeHttp();
    const opts: RequestOptions = {
      method,
      protocol: creds.server.protocol,
      hostname: creds.server.hostname.replace(/^\[|\]$/g, ''),
      port: creds.server.port || (secure ? 443 : 80),
      path: `${base}${path}`,
      agent,
      timeout: timeoutMs,
      headers: { Accept: 'application/json', 'User-Agent': userAgent, ...(token ? { Authorization: `Bearer ${token}` } : {}), ...headers },
    };
    return send(opts);
  }

  function readBody(res: IncomingMessage): Promise<string> {
    return readBodyBytes(res).then((b) => b.toString('utf8'));
  }

  function readBodyBytes(res: IncomingMessage): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY_BYTES) res.destroy(new Error(`response exceeds ${MAX_BODY_BYTES} bytes`));
        else chunks.push(c);
      });
      res.on('end', () => resolve(Buffer.concat(chunks)));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('response aborted')));
    });
  }

  /** One request over node:http(s), from the keep-alive pool. */
  const nodeExchange: HttpExchange = (req, path, headers, payload, timeoutMs) =>
    new Promise((resolve, reject) => {
      let r: ClientRequest;
      try {
        r = open(req.method, path, headers, timeoutMs);
      } catch (err) {
        reject(err);
        return;
      }
      let answered = false;
      r.on('timeout', () => r.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      r.on('error', (err: NodeJS.ErrnoException) => {
        if (answered) return;
        const stale = r.reusedSocket && (STALE_SOCKET_CODES.has(err.code ?? '') || err.message === 'socket hang up');
        reject(new KubeConnectionError(`${req.method} ${req.path}: ${err.message}`, err, stale));
      });
      r.on('response', (res) => {
        answered = true;
        readBody(res).then(
          (body) => {
            const retryAfter = res.headers['retry-after'];
            resolve({ status: res.statusCode ?? 0, retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, body });
          },
          (err: Error) => reject(new KubeConnectionError(`${req.method} ${req.path}: ${err.message}`, err, false)),
        );
      });
      r.end(payload);
    });

  const exchange: HttpExchange = isBun()
    ? bunFetchExchange({
        url: (path) => `${creds.server.origin}${base}${path}`,
        headers: () => {
          const token = creds.token();
          return { Accept: 'application/json', 'User-Agent': userAgent, ...(token ? { Authorization: `Bearer ${token}` } : {}) };
        },
        tls,
        maxBodyBytes: MAX_BODY_BYTES,
        connectionError: (req, err) => new KubeConnectionError(`${req.method} ${req.path}: ${err.message}`, err, false),
      })
    : nodeExchange;

  async function attempt<T>(req: KubeRequest, path: string, payload: Buffer | undefined, timeoutMs: number): Promise<T> {
    const headers: Record<string, string> = payload
      ? { 'Content-Type': req.contentType ?? 'application/json', 'Content-Length': String(payload.length) }
      : {};
    const { status, retryAfter, body } = await exchange(req, path, headers, payload, timeoutMs);
    if (status === 401) creds.invalidateToken();
    if (status < 200 || status >= 300) throw statusError(req.method, req.path, status, body, parseRetryAfter(retryAfter));
    if (body === '') return undefined as T;
    try {
      return JSON.parse(body) as T;
    } catch {
      throw new Error(`${req.method} ${req.path}: HTTP ${status} with a non-JSON body`);
    }
  }

  return {
    request<T>(req: KubeRequest): Promise<T> {
      const path = `${req.path}${queryString(req.query)}`;
      const payload = req.body === undefined ? undefined : Buffer.from(JSON.stringify(req.body));
      const timeoutMs = req.timeoutMs ?? options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
      const deadlineMs = req.deadlineMs ?? options.deadlineMs ?? DEFAULT_DEADLINE_MS;
      const idempotent = req.idempotent ?? req.method === 'GET';
      const started = monotonicNow();
      const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
      let staleRetries = 0;
      let transientRetries = 0;
      const classify = (err: unknown): RetryDecision => {
        if (err instanceof KubeConnectionError && err.staleSocket && staleRetries < MAX_STALE_SOCKET_RETRIES) {
          staleRetries++;
          return { retry: true, immediately: true };
        }
        if (!idempotent || !isTransientKubeError(err) || transientRetries >= maxAttempts - 1) return { retry: false };
        transientRetries++;
        return err instanceof KubeApiError && err.retryAfterMs !== undefined ? { retry: true, afterMs: err.retryAfterMs } : { retry: true };
      };
      return retryWithBackoff(
        () => attempt<T>(req, path, payload, Math.max(1, Math.min(timeoutMs, deadlineMs - (monotonicNow() - started)))),
        {
          policy: options.backoff ?? DEFAULT_BACKOFF,
          maxAttempts: maxAttempts + MAX_STALE_SOCKET_RETRIES,
          deadlineMs,
          classify,
          ...(options.onRetry ? { onRetry: (err: unknown, n: number, ms: number) => options.onRetry?.(err as Error, n, ms) } : {}),
          ...(options.sleep ? { sleep: options.sleep } : {}),
        },
      );
    },

    watch(path, query, onEvent, idleTimeoutMs, watchOptions = {}) {
      const { protobuf } = watchOptions;
      let r: ClientRequest | undefined;
      let stopped = false;
      const done = new Promise<void>((resolve, reject) => {
        let settled = false;
        const finish = (err?: Error) => {
          if (settled) return;
          settled = true;
          r?.destroy();
          if (err && !stopped) reject(err);
          else resolve();
        };
        try {
          // The idle timeout catches a connection that died without a FIN (node gone, NAT dropped).
          r = open(
            'GET',
            `${path}${queryString({ ...query, watch: 'true' })}`,
            protobuf ? { Accept: PROTOBUF_WATCH_ACCEPT } : {},
            idleTimeoutMs,
          );
        } catch (err) {
          finish(err as Error);
          return;
        }
        /**
         * Hands one event on; false once the stream is finished. A JSON object is projected onto
         * the protobuf type's fields; a decoded one has only those already.
         */
        const deliver = (type: unknown, object: unknown, decoded: boolean): boolean => {
          if (typeof type !== 'string' || !WATCH_EVENT_TYPES.has(type) || typeof object !== 'object' || object === null) {
            finish(new Error(`watch ${path}: malformed event`));
            return false;
          }
          if (type === 'ERROR') {
            const s = object as { message?: string; code?: number; reason?: string };
            finish(new KubeApiError(`watch ${path}: ${s.message ?? 'error event'}`, s.code ?? 500, s.reason));
            return false;
          }
          try {
            const kept = protobuf && !decoded ? projectJson(protobuf.schema, object) : object;
            onEvent({ type, object: kept } as WatchEvent);
          } catch (err) {
            finish(err as Error);
            return false;
          }
          return true;
        };
        const req = r;
        req.on('timeout', () => finish(new Error(`watch ${path}: nothing received for ${idleTimeoutMs} ms`)));
        req.on('error', (err) => finish(err));
        req.on('response', (res) => {
          const status = res.statusCode ?? 0;
          const binary = protobuf !== undefined && isProtobufContentType(res.headers['content-type']);
          if (status !== 200) {
            if (status === 401) creds.invalidateToken();
            readBodyBytes(res).then(
              (body) =>
                finish(binary ? protobufStatusError('GET', path, status, body) : statusError('GET', path, status, body.toString('utf8'))),
              finish,
            );
            return;
          }
          res.socket?.setKeepAlive(true, 15_000);
          let pending: Buffer = Buffer.alloc(0);
          const onFrames = (chunk: Buffer) => {
            pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
            while (!settled && pending.length >= FRAME_HEADER_BYTES) {
              const size = pending.readUInt32BE(0);
              if (size > MAX_WATCH_LINE_BYTES) {
                finish(new Error(`watch ${path}: event exceeds ${MAX_WATCH_LINE_BYTES} bytes`));
                return;
              }
              if (pending.length < FRAME_HEADER_BYTES + size) return;
              const frame = pending.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + size);
              pending = pending.subarray(FRAME_HEADER_BYTES + size);
              let event: ReturnType<typeof decodeWatchFrame>;
              try {
                event = decodeWatchFrame(frame, protobuf as ProtobufObjectType);
              } catch (err) {
                finish(new Error(`watch ${path}: malformed event: ${(err as Error).message}`));
                return;
              }
              if (!deliver(event.type, 'status' in event ? event.status : event.object, true)) return;
            }
          };
          const onLines = (chunk: Buffer) => {
            pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
            for (let nl = pending.indexOf(0x0a); !settled && nl >= 0; nl = pending.indexOf(0x0a)) {
              const line = pending.subarray(0, nl).toString('utf8').trim();
              pending = pending.subarray(nl + 1);
              if (line === '') continue;
              let event: { type?: unknown; object?: unknown };
              try {
                event = JSON.parse(line) as { type?: unknown; object?: unknown };
              } catch {
                finish(new Error(`watch ${path}: malformed event line`));
                return;
              }
              if (!deliver(event.type, event.object, false)) return;
            }
            if (pending.length > MAX_WATCH_LINE_BYTES) finish(new Error(`watch ${path}: event exceeds ${MAX_WATCH_LINE_BYTES} bytes`));
          };
          res.on('data', binary ? onFrames : onLines);
          res.on('end', () => finish());
          // A close without an end is a connection lost mid-stream, not the server's timeout.
          res.on('close', () => finish(new Error(`watch ${path}: connection closed mid-stream`)));
          res.on('error', (err) => finish(err));
        });
        req.end();
      });
      return {
        done,
        stop() {
          stopped = true;
          r?.destroy();
        },
      };
    },
  };
}
