import { readFileSync } from 'node:fs';
import type { Namespace, Pod } from '@istio-cni/capture';

/** The parts of the installer-written kubeconfig (SPEC 5.3) the plugin needs. */
export interface PluginKubeconfig {
  server: URL;
  ca?: Buffer;
  insecureSkipTlsVerify: boolean;
  token: string;
}

export class ApiUnauthorizedError extends Error {
  override name = 'ApiUnauthorizedError';
}

export class ApiRequestError extends Error {
  override name = 'ApiRequestError';
  readonly status: number | undefined;
  constructor(message: string, status?: number) {
    super(message);
    this.status = status;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function first(v: unknown, key: string, path: string): Record<string, unknown> {
  if (!Array.isArray(v) || !isRecord(v[0]) || !isRecord(v[0][key])) {
    throw new Error(`kubeconfig has no ${path}`);
  }
  return v[0][key] as Record<string, unknown>;
}

/** Reads the installer's kubeconfig. YAML is loaded lazily: only degraded mode ever needs it. */
export async function readPluginKubeconfig(path: string): Promise<PluginKubeconfig> {
  const text = readFileSync(path, 'utf8');
  const { parse } = await import('yaml');
  const doc: unknown = parse(text);
  if (!isRecord(doc)) throw new Error(`${path} is not a kubeconfig`);
  const cluster = first(doc.clusters, 'cluster', 'clusters[0].cluster');
  const user = first(doc.users, 'user', 'users[0].user');
  if (typeof cluster.server !== 'string') throw new Error(`${path}: cluster server missing`);
  if (typeof user.token !== 'string' || user.token === '') throw new Error(`${path}: user token missing`);
  const caData = cluster['certificate-authority-data'];
  return {
    server: new URL(cluster.server),
    ...(typeof caData === 'string' ? { ca: Buffer.from(caData, 'base64') } : {}),
    insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
    token: user.token.trim(),
  };
}

/** One GET against the API server with the plugin's service-account token. */
export async function apiGet(config: PluginKubeconfig, path: string, timeoutMs: number): Promise<unknown> {
  const secure = config.server.protocol === 'https:';
  const { request } = secure ? await import('node:https') : await import('node:http');
  const url = new URL(path, config.server);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'GET',
        headers: { Authorization: `Bearer ${config.token}`, Accept: 'application/json', 'User-Agent': 'istio-cni' },
        timeout: timeoutMs,
        ...(secure ? { ca: config.ca, rejectUnauthorized: !config.insecureSkipTlsVerify } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status === 401) {
            reject(new ApiUnauthorizedError('Unauthorized: the API server rejected the istio-cni token (expired or revoked?)'));
          } else if (status === 404) {
            resolve(undefined);
          } else if (status < 200 || status >= 300) {
            reject(new ApiRequestError(`GET ${url.pathname} answered HTTP ${status}: ${body.slice(0, 300)}`, status));
          } else {
            try {
              resolve(JSON.parse(body));
            } catch {
              reject(new ApiRequestError(`GET ${url.pathname} returned a non-JSON body`));
            }
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new ApiRequestError(`GET ${url.pathname} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

export async function getPod(config: PluginKubeconfig, namespace: string, name: string, timeoutMs: number): Promise<Pod | undefined> {
  const pod = await apiGet(config, `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`, timeoutMs);
  return pod as Pod | undefined;
}

export async function getNamespace(config: PluginKubeconfig, name: string, timeoutMs: number): Promise<Namespace | undefined> {
  return (await apiGet(config, `/api/v1/namespaces/${encodeURIComponent(name)}`, timeoutMs)) as Namespace | undefined;
}
