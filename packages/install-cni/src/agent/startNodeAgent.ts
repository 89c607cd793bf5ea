import { captureEnvironmentFrom, type EnablementSelector } from '@istio-cni/capture';
import { createExecCommandRunner, createPodNetnsGuard, createScratchNetnsOpener, createSidecarCaptureManager } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import type { Registry } from 'prom-client';
import { createKubeClient, type KubeClient, loadKubeConfig, nodePath, type KubeConfigSource } from '@istio-cni/kube';
import { watchCluster, type ClusterWatch, type PodWatch } from '../kube/watchCluster.ts';
import { createDaemonSetLookup } from '../kube/daemonSetLookup.ts';
import { createPodAnnotator } from '../kube/podStatusAnnotator.ts';
import type { DaemonSetLookup } from '../installer/upgradeSafety.ts';
import type { MeshDataplane } from '../ambient/meshDataplane.ts';
import { startAmbient, type Ambient, type AmbientOptions } from '../ambient/startAmbient.ts';
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
  /** HOST_PROC_DIR: the node's netns (`<hostProcDir>/1/ns/net`) is never a pod's. */
  hostProcDir: string;
  /** ISTIO_OUTBOUND_* variables (upstream `tools/common/config/config.go`), read once at start-up. */
  captureEnv: Record<string, string | undefined>;
  /** Simultaneous capture programs; more wait in line, up to `maxQueued`. */
  concurrency?: number;
  maxQueued?: number;
  logger: Logger;
  registry: Registry;
  /** `undefined` when the installer is ready, else why not. */
  installerNotReady(): string | undefined;
  /** Ambient settings; required when `ambientEnabled`. */
  ambient?: Omit<AmbientOptions, 'view' | 'synced' | 'annotator' | 'policy' | 'logger' | 'registry'> & { systemNamespace: string };
}

export interface NodeAgent {
  handler: HandoffHandler;
  /** Resolves once the informers are synced and, with ambient, the start-up reconciliation ran. */
  ready: Promise<void>;
  notReadyReason(): string | undefined;
  /** This node's pod informer, which repair shares when its selectors are the same. */
  pods: PodWatch;
  /** The DaemonSet lookup for the upgrade-safe shutdown (sidecar and ambient). */
  upgradeLookup: DaemonSetLookup;
  /** `cleanup`: not an upgrade, so node-level ambient state (host rules, probe sets) goes too. */
  stop(cleanup: boolean): Promise<void>;
}

export function startNodeAgent(options: NodeAgentOptions): NodeAgent {
  const kube = createKubeClient(loadKubeConfig(options.kube));
  const cluster = watchCluster(kube, { nodeName: options.nodeName, logger: options.logger, namespaces: options.ambientEnabled });
  const capture = createSidecarCaptureManager({
    runner: createExecCommandRunner(),
    openScratchNetns: createScratchNetnsOpener(),
    netnsGuard: createPodNetnsGuard({ hostProcDir: options.hostProcDir }),
    nativeNftables: options.nativeNftables,
    env: captureEnvironmentFrom(options.captureEnv),
    ...(options.forceIptablesBinary ? { forceIptablesBinary: options.forceIptablesBinary } : {}),
  });
  const ambientPolicy: { enabled: boolean; selectors: readonly EnablementSelector[]; dataplane?: MeshDataplane } = {
    enabled: options.ambientEnabled,
    selectors: options.ambientSelectors,
  };
  let ambient: Ambient | undefined;
  const ambientStarting = options.ambientEnabled ? startAmbientFor(kube, cluster, options) : undefined;
  const ready = (async () => {
    await cluster.synced;
    if (ambientStarting === undefined) return;
    ambient = await ambientStarting;
    ambientPolicy.dataplane = ambient.dataplane;
    await ambient.ready;
  })();
  const notReadyReason = (): string | undefined =>
    options.installerNotReady() ??
    (!cluster.view.isSynced()
      ? options.ambientEnabled
        ? 'pod and namespace watches not synced yet'
        : 'pod watch not synced yet'
      : options.ambientEnabled && !ambient?.isReady()
        ? 'ambient node agent still starting'
        : undefined);
  const handler = createNodeAgentHandler({
    view: cluster.view,
    reader: cluster.reader,
    capture,
    policy: { agentNamespace: options.podNamespace, excludeNamespaces: options.excludeNamespaces },
    ambient: ambientPolicy,
    limiter: createConcurrencyLimiter(options.concurrency ?? 4, options.maxQueued ?? 1000),
    logger: options.logger,
    notReadyReason,
    metrics: createAgentMetrics(options.registry),
  });
  return {
    handler: (request) => handler.handle(request),
    pods: cluster.pods,
    ready,
    notReadyReason,
    upgradeLookup: createDaemonSetLookup(kube, options.podNamespace, () => nodeLabels(kube, options.nodeName)),
    async stop(cleanup) {
      cluster.stop();
      const a = ambient ?? (await ambientStarting?.catch(() => undefined));
      await a?.stop(cleanup);
    },
  };
}

async function nodeLabels(kube: KubeClient, nodeName: string): Promise<Record<string, string>> {
  const node = await kube.request<{ metadata?: { labels?: Record<string, string> } }>({ method: 'GET', path: nodePath(nodeName) });
  return node.metadata?.labels ?? {};
}

function startAmbientFor(kube: KubeClient, cluster: ClusterWatch, options: NodeAgentOptions): Promise<Ambient> {
  const a = options.ambient;
  if (a === undefined) return Promise.reject(new Error('ambient enabled without ambient settings'));
  return startAmbient({
    ...a,
    view: cluster.view,
    synced: cluster.synced,
    annotator: createPodAnnotator(kube),
    policy: { selectors: options.ambientSelectors, excludeNamespaces: options.excludeNamespaces, systemNamespace: a.systemNamespace },
    logger: options.logger.with({ component: 'ambient' }),
    registry: options.registry,
  });
}
