import { readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { join } from 'node:path';
import { parse } from 'yaml';
import { parseInstallerKubeconfig } from './installerKubeconfig.ts';
import { credentialsFromKubeconfig, tokenFromFile, type KubeCredentials } from './kubeconfigCredentials.ts';

export interface KubeConfigSource {
  /** A kubeconfig file (tests, running outside a pod). Wins when set. */
  kubeconfigPath?: string;
  /** In-cluster: the projected service-account directory (token, ca.crt). */
  serviceAccountDir: string;
  serviceHost?: string;
  servicePort?: string;
  serviceProtocol?: string;
}

/** Any kubeconfig text, as a document: the installer's own format directly, anything else through the YAML parser. */
export function parseKubeconfigText(text: string): unknown {
  return parseInstallerKubeconfig(text) ?? parse(text);
}

/**
 * Reads a kubeconfig file: the current context's cluster and user (or the first of each); see
 * {@link credentialsFromKubeconfig} for what is supported.
 */
export function readKubeconfigFile(file: string): KubeCredentials {
  return credentialsFromKubeconfig(parseKubeconfigText(readFileSync(file, 'utf8')), file);
}

/**
 * The daemon's own API credentials: `KUBECONFIG` when set, else in-cluster (the service host and
 * port from the environment, the projected token re-read as kubelet rotates it, its `ca.crt`).
 */
export function loadKubeConfig(source: KubeConfigSource): KubeCredentials {
  if (source.kubeconfigPath) return readKubeconfigFile(source.kubeconfigPath);
  const host = source.serviceHost;
  const port = source.servicePort;
  if (!host || !port) {
    throw new Error('KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set to reach the Kubernetes API (or set KUBECONFIG)');
  }
  const server = new URL(`${source.serviceProtocol || 'https'}://${isIPv6(host) ? `[${host}]` : host}:${port}`);
  let ca: Buffer | undefined;
  if (server.protocol === 'https:') ca = readFileSync(join(source.serviceAccountDir, 'ca.crt'));
  return {
    server,
    insecureSkipTlsVerify: false,
    ...(ca ? { ca } : {}),
    ...tokenFromFile(join(source.serviceAccountDir, 'token')),
  };
}
