/**
 * The REST client with a kubeconfig reader that loads no YAML parser up front, for the plugin's
 * degraded mode (docs/architecture.md "Degraded mode"): nothing behind this entry imports the
 * general kubeconfig parser except on demand, for a kubeconfig the installer did not write.
 */
export { retryWithBackoff } from './backoff.ts';
export { KubeApiError, createKubeClient, getOrUndefined, type KubeClient } from './kubeClient.ts';
export type { KubeCredentials } from './kubeconfigCredentials.ts';
export { readKubeconfigFileLazily } from './readKubeconfigFileLazily.ts';
export { namespacePath, podPath } from './resourcePaths.ts';
