import { readFileSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';

/** Where the API server is and how the daemon proves who it is. */
export interface KubeCredentials {
  server: URL;
  ca?: Buffer;
  insecureSkipTlsVerify: boolean;
  tlsServerName?: string;
  clientCert?: Buffer;
  clientKey?: Buffer;
  /** The bearer token for the next request (read from its file again when that file is rotated). */
  token(): string | undefined;
  /** Forget a cached token file, e.g. after a 401. */
  invalidateToken(): void;
}

const TOKEN_FILE_CACHE_MS = 10_000;

/** A token file re-read at most every 10 s, so kubelet's token rotation needs no restart. */
export function tokenFromFile(path: string): Pick<KubeCredentials, 'token' | 'invalidateToken'> {
  let cached: { value: string; readAt: number } | undefined;
  return {
    token() {
      const now = Date.now();
      if (cached === undefined || now - cached.readAt > TOKEN_FILE_CACHE_MS) {
        cached = { value: readFileSync(path, 'utf8').trim(), readAt: now };
      }
      return cached.value === '' ? undefined : cached.value;
    },
    invalidateToken() {
      cached = undefined;
    },
  };
}

function staticToken(token: string | undefined): Pick<KubeCredentials, 'token' | 'invalidateToken'> {
  return { token: () => token, invalidateToken: () => {} };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function named(list: unknown, name: string | undefined, key: string, file: string): Record<string, unknown> {
  if (!Array.isArray(list) || list.length === 0) throw new Error(`kubeconfig ${file} has no ${key}s`);
  const entry = name === undefined ? list[0] : list.find((e) => isRecord(e) && e.name === name);
  if (!isRecord(entry) || !isRecord(entry[key])) throw new Error(`kubeconfig ${file} has no ${key} ${JSON.stringify(name ?? '')}`);
  return entry[key] as Record<string, unknown>;
}

function optionalString(o: Record<string, unknown>, field: string, file: string): string | undefined {
  const v = o[field];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw new Error(`kubeconfig ${file}: ${field} must be a string`);
  return v;
}

/** `<field>-data` (base64) or `<field>` (a path, relative to the kubeconfig's directory). */
function fileOrData(o: Record<string, unknown>, field: string, file: string): Buffer | undefined {
  const data = optionalString(o, `${field}-data`, file);
  if (data !== undefined) return Buffer.from(data, 'base64');
  const path = optionalString(o, field, file);
  if (path === undefined) return undefined;
  return readFileSync(isAbsolute(path) ? path : join(dirname(file), path));
}

const UNSUPPORTED_USER_FIELDS = ['exec', 'auth-provider', 'username', 'password'];

/**
 * The credentials of a parsed kubeconfig document: the current context's cluster and user (or the
 * first of each). Bearer tokens (inline or `tokenFile`) and client certificates are supported;
 * exec and auth-provider plugins are refused with a message, since a node daemon has no business
 * running them. `file` names the document in errors and anchors its relative paths.
 */
export function credentialsFromKubeconfig(doc: unknown, file: string): KubeCredentials {
  if (!isRecord(doc)) throw new Error(`${file} is not a kubeconfig`);
  const currentContext = optionalString(doc, 'current-context', file);
  let clusterName: string | undefined;
  let userName: string | undefined;
  if (currentContext !== undefined) {
    const context = named(doc.contexts, currentContext, 'context', file);
    clusterName = optionalString(context, 'cluster', file);
    userName = optionalString(context, 'user', file);
  }
  const cluster = named(doc.clusters, clusterName, 'cluster', file);
  const user = Array.isArray(doc.users) && doc.users.length > 0 ? named(doc.users, userName, 'user', file) : {};
  const server = optionalString(cluster, 'server', file);
  if (server === undefined) throw new Error(`kubeconfig ${file}: cluster has no server`);
  for (const f of UNSUPPORTED_USER_FIELDS) {
    if (user[f] !== undefined)
      throw new Error(`kubeconfig ${file}: user ${f} is not supported (use a token, tokenFile or client certificate)`);
  }
  const tokenFile = optionalString(user, 'tokenFile', file);
  const ca = fileOrData(cluster, 'certificate-authority', file);
  const clientCert = fileOrData(user, 'client-certificate', file);
  const clientKey = fileOrData(user, 'client-key', file);
  const tlsServerName = optionalString(cluster, 'tls-server-name', file);
  return {
    server: new URL(server),
    insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
    ...(ca ? { ca } : {}),
    ...(tlsServerName ? { tlsServerName } : {}),
    ...(clientCert ? { clientCert } : {}),
    ...(clientKey ? { clientKey } : {}),
    ...(tokenFile !== undefined
      ? tokenFromFile(isAbsolute(tokenFile) ? tokenFile : join(dirname(file), tokenFile))
      : staticToken(optionalString(user, 'token', file))),
  };
}
