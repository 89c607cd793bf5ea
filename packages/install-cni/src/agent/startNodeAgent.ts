import { captureEnvironmentFrom, type EnablementSelector } from '@istio-cni/capture';
import { createExecCommandRunner, createScratchNetnsOpener, createSidecarCaptureManager } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import type { Registry } from 'prom-client';
import { loadKubeConfig, type KubeConfigSource } from '../kube/loadKubeConfig.ts';
import { watchCluster } from '../kube/watchCluster.ts';
import { createAgentMetrics } from './agentMetrics.ts';
import { createConcurrencyLimiter } from './concurrencyLimiter.ts';
import type { HandoffHandler } from './handoffServer.ts';
import { createNodeAgentHandler } from './nodeAgentHandler.ts';

export interface NodeAgentOptions {
  kube: KubeConfigSource;
  nodeName: string;
  /** POD_NAMESPACE: the agent's own namespace. */
  podNamespace: string;
  excludeNamespaces: readonly string[];
  ambientEnabled: boolean;
  ambientSelectors: readonly EnablementSelector[];
  nativeNftables: boolean;
  forceIptablesBinary?: string;
  /** ISTIO_OUTBOUND_* variables (SPEC 3.1), read once at start-up. */
  captureEnv: Record<string, string | undefined>;
  /** Simultaneous capture programs; more wait in line, up to `maxQueued`. */
  concurrency?: number;
  maxQueued?: number;
  logger: Logger;
  registry: Registry;
  /** `undefined` when the installer is ready, else why not. */
  installerNotReady(): string | undefined;
}

export interface NodeAgent {
  handler: HandoffHandler;
  /** Resolves once the pod and namespace informers are synced. */
  synced: Promise<void>;
  notReadyReason(): string | undefined;
  stop(): void;
}

export function startNodeAgent(options: NodeAgentOptions): NodeAgent {
  const kc = loadKubeConfig(options.kube);
  const cluster = watchCluster(kc, { nodeName: options.nodeName, logger: options.logger });
  const capture = createSidecarCaptureManager({
    runner: createExecCommandRunner(),
    openScratchNetns: createScratchNetnsOpener(),
    nativeNftables: options.nativeNftables,
    env: captureEnvironmentFrom(options.captureEnv),
    ...(options.forceIptablesBinary ? { forceIptablesBinary: options.forceIptablesBinary } : {}),
  });
  const notReadyReason = (): string | undefined =>
    options.installerNotReady() ?? (cluster.view.isSynced() ? undefined : 'pod and namespace watches not synced yet');
  const handler = createNodeAgentHandler({
    view: cluster.view,
    reader: cluster.reader,
    capture,
    policy: { agentNamespace: options.podNamespace, excludeNamespaces: options.excludeNamespaces },
    ambient: { enabled: options.ambientEnabled, selectors: options.ambientSelectors },
    limiter: createConcurrencyLimiter(options.concurrency ?? 4, options.maxQueued ?? 1000),
    logger: options.logger,
    notReadyReason,
    metrics: createAgentMetrics(options.registry),
  });
  return {
    handler: (request) => handler.handle(request),
    synced: cluster.synced,
    notReadyReason,
    stop: () => cluster.stop(),
  };
}
