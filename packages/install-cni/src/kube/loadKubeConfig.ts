import { isIPv6 } from 'node:net';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';

export interface KubeConfigSource {
  /** A kubeconfig file (tests, running outside a pod). Wins when set. */
  kubeconfigPath?: string;
  /** In-cluster: the projected service-account directory (token, ca.crt). */
  serviceAccountDir: string;
  serviceHost?: string;
  servicePort?: string;
  serviceProtocol?: string;
}

/**
 * The daemon's own API credentials. In-cluster it reads the token file on every refresh (the
 * `tokenFile` provider), so kubelet's token rotation needs no restart.
 */
export function loadKubeConfig(source: KubeConfigSource): KubeConfig {
  const kc = new KubeConfig();
  if (source.kubeconfigPath) {
    kc.loadFromFile(source.kubeconfigPath);
    return kc;
  }
  const host = source.serviceHost;
  const port = source.servicePort;
  if (!host || !port) {
    throw new Error('KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set to reach the Kubernetes API (or set KUBECONFIG)');
  }
  const server = `${source.serviceProtocol || 'https'}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  kc.loadFromClusterAndUser(
    { name: 'in-cluster', server, caFile: join(source.serviceAccountDir, 'ca.crt'), skipTLSVerify: false },
    {
      name: 'istio-cni',
      authProvider: { name: 'tokenFile', config: { tokenFile: join(source.serviceAccountDir, 'token') } },
    },
  );
  return kc;
}
