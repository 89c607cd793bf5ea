import { request } from 'node:https';

export interface KubeResponse<T = unknown> {
  status: number;
  body: T;
  /** The raw body, for failure messages and non-JSON endpoints like /readyz. */
  text: string;
  /** The API server's `Warning` headers (deprecated fields and annotations, for instance). */
  warnings: string[];
}

export interface KubeRequestOptions {
  /** Bearer token; overrides the client's own. `null` sends no credential at all. */
  token?: string | null;
  contentType?: string;
  timeoutMs?: number;
}

export interface KubeClient {
  readonly server: string;
  request<T = unknown>(method: string, path: string, body?: unknown, options?: KubeRequestOptions): Promise<KubeResponse<T>>;
  /** Like request, but throws naming the call unless the status is 2xx. */
  must<T = Record<string, unknown>>(method: string, path: string, body?: unknown, options?: KubeRequestOptions): Promise<T>;
  /** A client for the same server with another bearer token (a service account's, say). */
  withToken(token: string | null): KubeClient;
}

/** A minimal Kubernetes REST client over node:https, trusting only the cluster CA. */
export function makeKubeClient(server: string, ca: string, token: string | null): KubeClient {
  const client: KubeClient = {
    server,
    request<T>(method: string, path: string, body?: unknown, options: KubeRequestOptions = {}) {
      const bearer = options.token === undefined ? token : options.token;
      const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
      const headers: Record<string, string> = { accept: 'application/json' };
      if (bearer !== null) headers.authorization = `Bearer ${bearer}`;
      if (payload !== undefined) {
        headers['content-type'] = options.contentType ?? 'application/json';
        headers['content-length'] = String(Buffer.byteLength(payload));
      }
      return new Promise<KubeResponse<T>>((resolveReq, reject) => {
        const req = request(new URL(path, server), { method, headers, ca, timeout: options.timeoutMs ?? 15_000 }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // /readyz and friends answer plain text
            }
            resolveReq({ status: res.statusCode ?? 0, body: parsed as T, text, warnings: res.headersDistinct.warning ?? [] });
          });
          res.on('error', reject);
        });
        req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
        req.on('error', reject);
        req.end(payload);
      });
    },
    async must<T>(method: string, path: string, body?: unknown, options?: KubeRequestOptions) {
      const res = await client.request<T>(method, path, body, options);
      if (res.status < 200 || res.status > 299) throw new Error(`${method} ${path} answered ${res.status}: ${res.text}`);
      return res.body;
    },
    withToken(other) {
      return makeKubeClient(server, ca, other);
    },
  };
  return client;
}
