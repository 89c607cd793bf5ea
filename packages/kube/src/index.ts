export { loadKubeConfig, readKubeconfigFile, type KubeConfigSource, type KubeCredentials } from './loadKubeConfig.ts';
export {
  JSON_PATCH,
  KubeApiError,
  MERGE_PATCH,
  createKubeClient,
  getOrUndefined,
  isNotFound,
  type KubeClient,
  type KubeClientOptions,
  type KubeRequest,
  type WatchEvent,
  type WatchEventType,
  type WatchStream,
} from './kubeClient.ts';
export { daemonSetPath, eventsPath, namespacePath, nodePath, podPath, podStatusPath } from './resourcePaths.ts';
