/**
 * One Kubernetes API request through Bun's own `fetch`, for the plugin's degraded mode (the plugin
 * is built with Bun's compiler, scripts/build.ts). Under Bun, node:https is a JavaScript layer over
 * this same fetch: loading and compiling it costs the one-shot plugin ~5 MiB of peak RSS for one
 * request (docs/decisions.md, "The plugin: Bun").
 *
 * Two things differ from node:https and are set here: Bun's fetch goes through HTTP_PROXY /
 * HTTPS_PROXY / ALL_PROXY when the environment names one (node:https never does, and the runtime's
 * environment the plugin inherits may carry a proxy meant for image pulls), so `proxy: false`; and
 * it follows redirects, which a Kubernetes client must not do with its token, so `redirect: manual`.
 */

/** What the exchange needs of the request: its method and path (for messages). */
export interface ExchangeRequest {
  method: string;
  path: string;
}

export interface HttpAnswer {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

/** One request and its whole answer; rejects (a KubeConnectionError from the client) when no answer came. */
export type HttpExchange = (
  req: ExchangeRequest,
  path: string,
  headers: Record<string, string>,
  payload: Buffer | undefined,
  timeoutMs: number,
) => Promise<HttpAnswer>;

/** The TLS settings of a kubeconfig, in node:tls's names. */
export interface TlsSettings {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  servername?: string;
  rejectUnauthorized?: boolean;
}

export interface FetchExchangeOptions {
  url(path: string): string;
  /** Accept, User-Agent, Authorization: read per request (the token may be rotated). */
  headers(): Record<string, string>;
  tls: TlsSettings;
  maxBodyBytes: number;
  connectionError(req: ExchangeRequest, cause: Error): Error;
}

/** Bun's additions to fetch's options. */
interface BunFetchInit extends RequestInit {
  proxy: false;
  tls: { ca?: string; cert?: string; key?: string; serverName?: string; rejectUnauthorized?: boolean };
}

export function isBun(): boolean {
  return (globalThis as { Bun?: unknown }).Bun !== undefined;
}

async function readCapped(res: Response, max: number): Promise<string> {
  if (res.body === null) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      throw new Error(`response exceeds ${max} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function bunFetchExchange(options: FetchExchangeOptions): HttpExchange {
  const { ca, cert, key, servername, rejectUnauthorized } = options.tls;
  const tls: BunFetchInit['tls'] = {
    ...(ca ? { ca: ca.toString('utf8') } : {}),
    ...(cert ? { cert: cert.toString('utf8') } : {}),
    ...(key ? { key: key.toString('utf8') } : {}),
    ...(servername ? { serverName: servername } : {}),
    ...(rejectUnauthorized === undefined ? {} : { rejectUnauthorized }),
  };
  return async (req, path, headers, payload, timeoutMs) => {
    const { 'Content-Length': _length, ...rest } = headers;
    const init: BunFetchInit = {
      method: req.method,
      headers: { ...options.headers(), ...rest },
      ...(payload === undefined ? {} : { body: new Uint8Array(payload) }),
      signal: AbortSignal.timeout(timeoutMs),
      redirect: 'manual',
      proxy: false,
      tls,
    };
    try {
      const res = await fetch(options.url(path), init);
      return {
        status: res.status,
        retryAfter: res.headers.get('retry-after') ?? undefined,
        body: await readCapped(res, options.maxBodyBytes),
      };
    } catch (err) {
      const e = err as Error;
      const cause = e.name === 'TimeoutError' ? new Error(`no answer within ${timeoutMs} ms`, { cause: e }) : e;
      throw options.connectionError(req, cause);
    }
  };
}
