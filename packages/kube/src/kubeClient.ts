import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage, type RequestOptions } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { KubeCredentials } from './loadKubeConfig.ts';

/**
 * A small Kubernetes REST client over node:http(s): JSON requests and watch streams, with the
 * daemon's credentials. It replaces @kubernetes/client-node, whose generated models, serializer
 * and bundled HTTP stack cost the daemon ~28 MiB of heap and ~10 MiB of mapped code at load
 * (README, "Kubernetes client"), for the dozen calls the daemon makes; the plugin's degraded mode
 * uses it too.
 */

export interface KubeRequest {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  path: string;
  query?: Readonly<Record<string, string | undefined>>;
  body?: unknown;
  /** Defaults to application/json; PATCH needs a patch type. */
  contentType?: string;
  timeoutMs?: number;
}

export const MERGE_PATCH = 'application/merge-patch+json';
export const JSON_PATCH = 'application/json-patch+json';

/** A non-2xx answer. `code` is the HTTP status (or the code of a watch ERROR event's Status). */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  readonly code: number;
  readonly reason: string | undefined;
  constructor(message: string, code: number, reason?: string) {
    super(message);
    this.code = code;
    this.reason = reason;
  }
}

export function isNotFound(err: unknown): boolean {
  return err instanceof KubeApiError && err.code === 404;
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

export interface KubeClient {
  request<T = unknown>(req: KubeRequest): Promise<T>;
  /** `GET path?watch=true&…`; `onEvent` is called for each event, in order. */
  watch(path: string, query: Readonly<Record<string, string | undefined>>, onEvent: (event: WatchEvent) => void, idleTimeoutMs: number): WatchStream;
}

export interface KubeClientOptions {
  userAgent?: string;
  /** Default per-request timeout. */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 30_000;
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

/** The message of a `Status` body, or the start of whatever the server sent. */
function statusError(method: string, path: string, status: number, body: string): KubeApiError {
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
  return new KubeApiError(`${method} ${path}: HTTP ${status}: ${message}`, status, reason);
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
  const agent = secure ? new HttpsAgent({ keepAlive: true, maxFreeSockets: 4, ...tls }) : new HttpAgent({ keepAlive: true, maxFreeSockets: 4 });
  const send = secure ? httpsRequest : httpRequest;
  const base = creds.server.pathname.replace(/\/+$/, '');
  const userAgent = options.userAgent ?? 'istio-cni';

  function open(method: string, path: string, headers: Record<string, string>, timeoutMs: number): ClientRequest {
    const token = creds.token();
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
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY_BYTES) res.destroy(new Error(`response exceeds ${MAX_BODY_BYTES} bytes`));
        else chunks.push(c);
      });
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('response aborted')));
    });
  }

  return {
    request<T>(req: KubeRequest): Promise<T> {
      const path = `${req.path}${queryString(req.query)}`;
      const payload = req.body === undefined ? undefined : Buffer.from(JSON.stringify(req.body));
      const timeoutMs = req.timeoutMs ?? options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
      return new Promise<T>((resolve, reject) => {
        const headers: Record<string, string> = payload
          ? { 'Content-Type': req.contentType ?? 'application/json', 'Content-Length': String(payload.length) }
          : {};
        let r: ClientRequest;
        try {
          r = open(req.method, path, headers, timeoutMs);
        } catch (err) {
          reject(err);
          return;
        }
        r.on('timeout', () => r.destroy(new Error(`${req.method} ${req.path}: no answer within ${timeoutMs} ms`)));
        r.on('error', reject);
        r.on('response', (res) => {
          readBody(res).then((body) => {
            const status = res.statusCode ?? 0;
            if (status === 401) creds.invalidateToken();
            if (status < 200 || status >= 300) {
              reject(statusError(req.method, req.path, status, body));
              return;
            }
            if (body === '') {
              resolve(undefined as T);
              return;
            }
            try {
              resolve(JSON.parse(body) as T);
            } catch {
              reject(new Error(`${req.method} ${req.path}: HTTP ${status} with a non-JSON body`));
            }
          }, reject);
        });
        r.end(payload);
      });
    },

    watch(path, query, onEvent, idleTimeoutMs) {
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
          r = open('GET', `${path}${queryString({ ...query, watch: 'true' })}`, {}, idleTimeoutMs);
        } catch (err) {
          finish(err as Error);
          return;
        }
        const req = r;
        req.on('timeout', () => finish(new Error(`watch ${path}: nothing received for ${idleTimeoutMs} ms`)));
        req.on('error', (err) => finish(err));
        req.on('response', (res) => {
          const status = res.statusCode ?? 0;
          if (status !== 200) {
            if (status === 401) creds.invalidateToken();
            readBody(res).then((body) => finish(statusError('GET', path, status, body)), finish);
            return;
          }
          res.socket?.setKeepAlive(true, 15_000);
          let pending: Buffer = Buffer.alloc(0);
          res.on('data', (chunk: Buffer) => {
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
              if (typeof event.type !== 'string' || !WATCH_EVENT_TYPES.has(event.type) || typeof event.object !== 'object' || event.object === null) {
                finish(new Error(`watch ${path}: malformed event`));
                return;
              }
              if (event.type === 'ERROR') {
                const s = event.object as { message?: string; code?: number; reason?: string };
                finish(new KubeApiError(`watch ${path}: ${s.message ?? 'error event'}`, s.code ?? 500, s.reason));
                return;
              }
              try {
                onEvent(event as WatchEvent);
              } catch (err) {
                finish(err as Error);
                return;
              }
            }
            if (pending.length > MAX_WATCH_LINE_BYTES) finish(new Error(`watch ${path}: event exceeds ${MAX_WATCH_LINE_BYTES} bytes`));
          });
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
