export { loadKubeConfig, parseKubeconfigText, readKubeconfigFile, type KubeConfigSource } from './loadKubeConfig.ts';
export { credentialsFromKubeconfig, type KubeCredentials } from './kubeconfigCredentials.ts';
export { parseInstallerKubeconfig } from './installerKubeconfig.ts';
export { readKubeconfigFileLazily } from './readKubeconfigFileLazily.ts';
export {
  Backoff,
  backoffDelay,
  monotonicNow,
  retryWithBackoff,
  type BackoffPolicy,
  type RetryDecision,
  type RetryOptions,
} from './backoff.ts';
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
  type WatchOptions,
  type WatchStream,
} from './kubeClient.ts';
export { decodeMessage, messageSchema, projectJson, type FieldSchema, type MessageSchema } from './protobuf/messageSchema.ts';
export { decodeStatusBody, decodeWatchFrame, type ProtobufObjectType } from './protobuf/watchProtobuf.ts';
export { ProtobufError } from './protobuf/wireReader.ts';
export { daemonSetPath, eventsPath, namespacePath, nodePath, podPath, podStatusPath } from './resourcePaths.ts';
