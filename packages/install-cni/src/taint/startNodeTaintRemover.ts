import type { Logger } from '@istio-cni/handoff';
import { createKubeClient, loadKubeConfig } from '@istio-cni/kube';
import { daemonKubeSource } from '../repair/daemonKubeSource.ts';
import type { Settings } from '../settings/settings.ts';
import { createKubeNodeTaintApi } from './nodeTaintApi.ts';
import { createNodeTaintRemover, type NodeTaintRemover } from './nodeTaintRemover.ts';

export interface StartNodeTaintRemoverOptions {
  settings: Settings;
  kubeconfigPath?: string | undefined;
  logger: Logger;
  retryDelayMs?: number;
}

/** The remover when NODE_TAINT_ENABLED and the API is reachable; `undefined` (logged) otherwise. */
export function startNodeTaintRemover(options: StartNodeTaintRemoverOptions): NodeTaintRemover | undefined {
  const { settings } = options;
  if (!settings.nodeTaint.enabled) return undefined;
  const logger = options.logger.with({ component: 'taint' });
  const source = daemonKubeSource(settings, options.kubeconfigPath);
  if (source === undefined) {
    logger.warn('no Kubernetes API configured: the node readiness taint cannot be removed');
    return undefined;
  }
  // NODE_NAME comes from the downward API; KUBERNETES_NODE_NAME falls back to the hostname.
  const nodeName = settings.nodeName || settings.repair.nodeName || settings.k8sNodeName;
  return createNodeTaintRemover({
    api: createKubeNodeTaintApi(createKubeClient(loadKubeConfig(source))),
    nodeName,
    taintKey: settings.nodeTaint.key,
    logger,
    ...(options.retryDelayMs === undefined ? {} : { retryDelayMs: options.retryDelayMs }),
  });
}
