import { isIP } from 'node:net';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import YAML from 'yaml';
import { RUN_DIR_MODE, type Logger } from '@istio-cni/handoff';
import { atomicWrite, removeStaleTemps } from './atomicWrite.ts';
import { recordWrite, type WriteStats } from './writeStats.ts';

export interface KubeconfigInput {
  k8sServiceProtocol: string;
  k8sServiceHost: string;
  k8sServicePort: string;
  /** Raw CA file bytes; undefined with skipTlsVerify. */
  caData?: Uint8Array;
  skipTlsVerify: boolean;
  token: string;
}

export class KubeconfigError extends Error {
  override name = 'KubeconfigError';
}

function serverUrl(protocol: string, host: string, port: string): string {
  const h = isIP(host) === 6 ? `[${host}]` : host;
  return `${protocol || 'https'}://${h}:${port}`;
}

/** The plugin's kubeconfig (upstream `kubeconfig.go`): keys sorted, list items at the parent's indentation. */
export function buildKubeconfig(input: KubeconfigInput, redact = false): string {
  const cluster: Record<string, unknown> = {};
  if (input.skipTlsVerify) cluster['insecure-skip-tls-verify'] = true;
  else {
    if (!input.caData) throw new KubeconfigError('CA data missing and skip-TLS-verify not set');
    cluster['certificate-authority-data'] = redact ? '<redacted>' : Buffer.from(input.caData).toString('base64');
  }
  cluster.server = serverUrl(input.k8sServiceProtocol, input.k8sServiceHost, input.k8sServicePort);
  const doc = {
    apiVersion: 'v1',
    clusters: [{ cluster, name: 'local' }],
    contexts: [{ context: { cluster: 'local', user: 'istio-cni' }, name: 'istio-cni-context' }],
    'current-context': 'istio-cni-context',
    kind: 'Config',
    users: [{ name: 'istio-cni', user: { token: redact ? '<redacted>' : input.token } }],
  };
  return YAML.stringify(doc, { indentSeq: false, lineWidth: 0, sortMapEntries: true });
}

export interface WriteKubeconfigOptions {
  path: string;
  mode: number;
  k8sServiceProtocol: string;
  k8sServiceHost: string;
  k8sServicePort: string;
  kubeCaFile: string;
  skipTlsVerify: boolean;
  tokenFile: string;
  logger?: Logger;
  stats?: WriteStats;
}

async function readInput(what: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new KubeconfigError(`failed to read ${what} ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/** Writes the kubeconfig unless the file already has exactly these bytes and mode. */
export async function writeKubeconfig(o: WriteKubeconfigOptions): Promise<boolean> {
  if (!o.k8sServiceHost) throw new KubeconfigError('KUBERNETES_SERVICE_HOST not set. Is this not running within a pod?');
  if (!o.k8sServicePort) throw new KubeconfigError('KUBERNETES_SERVICE_PORT not set. Is this not running within a pod?');
  const token = (await readInput('service account token', o.tokenFile)).toString('utf8');
  const caData = o.skipTlsVerify ? undefined : await readInput('CA file', o.kubeCaFile);
  const input: KubeconfigInput = { ...o, token, ...(caData ? { caData } : {}) };
  const text = buildKubeconfig(input);
  await removeStaleTemps(o.path);
  try {
    const [current, st] = await Promise.all([readFile(o.path, 'utf8'), stat(o.path)]);
    if (current === text && (st.mode & 0o777) === o.mode) return false;
  } catch {
    // Missing or unreadable: write it.
  }
  // The first pass starts before the daemon's servers have created the run dir.
  await mkdir(dirname(o.path), { recursive: true, mode: RUN_DIR_MODE });
  await atomicWrite(o.path, text, o.mode);
  recordWrite(o.stats, o.path, text);
  o.logger?.info('wrote kubeconfig', { path: o.path, kubeconfig: buildKubeconfig(input, true) });
  return true;
}
