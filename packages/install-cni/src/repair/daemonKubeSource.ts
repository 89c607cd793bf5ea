import type { KubeConfigSource } from '@istio-cni/kube';
import type { Settings } from '../settings/settings.ts';

/** The daemon's own API credentials (as the agent uses them); `undefined` when no API is configured. */
export function daemonKubeSource(settings: Settings, kubeconfigPath: string | undefined): KubeConfigSource | undefined {
  if (!kubeconfigPath && !(settings.k8sServiceHost && settings.k8sServicePort)) return undefined;
  return {
    ...(kubeconfigPath ? { kubeconfigPath } : {}),
    serviceAccountDir: settings.serviceAccountDir,
    serviceHost: settings.k8sServiceHost,
    servicePort: settings.k8sServicePort,
    serviceProtocol: settings.k8sServiceProtocol,
  };
}
