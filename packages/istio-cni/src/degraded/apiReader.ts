import type { Namespace, Pod } from '@istio-cni/capture';
import {
  KubeApiError,
  createKubeClient,
  getOrUndefined,
  namespacePath,
  podPath,
  readKubeconfigFileLazily,
  type KubeClient,
} from '@istio-cni/kube/client';

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

/** A client from the installer's kubeconfig (upstream `cni/pkg/install/kubeconfig.go`), whose token must be there. */
export async function pluginApiClient(path: string, timeoutMs: number): Promise<KubeClient> {
  const creds = await readKubeconfigFileLazily(path);
  if (creds.token() === undefined) throw new Error(`${path}: user token missing`);
  // Each read's own retries stay within one attempt's time; degraded mode's loop spans the rest.
  return createKubeClient(creds, { timeoutMs, deadlineMs: timeoutMs });
}

/** One GET with the plugin's token: `undefined` for 404; 401 and other failures as typed errors. */
async function get<T>(client: KubeClient, path: string): Promise<T | undefined> {
  try {
    return await getOrUndefined<T>(client, path);
  } catch (err) {
    if (!(err instanceof KubeApiError)) throw new ApiRequestError((err as Error).message);
    if (err.code === 401) throw new ApiUnauthorizedError('Unauthorized: the API server rejected the istio-cni token (expired or revoked?)');
    throw new ApiRequestError(err.message, err.code);
  }
}

export function getPod(client: KubeClient, namespace: string, name: string): Promise<Pod | undefined> {
  return get<Pod>(client, podPath(namespace, name));
}

export function getNamespace(client: KubeClient, name: string): Promise<Namespace | undefined> {
  return get<Namespace>(client, namespacePath(name));
}

/** A pod name no pod has: its GET answers 404 exactly when the API is reachable and the token may read pods. */
const PROBE_POD = podPath('kube-system', 'istio-cni-status-probe');

/** Throws unless the plugin's token can read pods now (401, 403, no answer). */
export async function probePodRead(client: KubeClient): Promise<void> {
  await get<Pod>(client, PROBE_POD);
}
