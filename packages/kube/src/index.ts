export { loadKubeConfig, readKubeconfigFile, type KubeConfigSource, type KubeCredentials } from './loadKubeConfig.ts';
export { Backoff, backoffDelay, retryWithBackoff, type BackoffPolicy, type RetryDecision, type RetryOptions } from './backoff.ts';
export {
  IDLE_SOCKET_MS,
  JSON_PATCH,
  KubeApiError,
  KubeConnectionError,
  MERGE_PATCH,
  createKubeClient,
  getOrUndefined,
  isNotFound,
  isTransientKubeError,
  parseRetryAfter,
  type KubeClient,
  type KubeClientOptions,
  type KubeRequest,
  type WatchEvent,
  type WatchEventType,
  type WatchStream,
} from './kubeClient.ts';
export { daemonSetPath, eventsPath, namespacePath, nodePath, podPath, podStatusPath } from './resourcePaths.ts';
