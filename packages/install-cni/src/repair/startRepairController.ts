import { captureEnvironmentFrom } from '@istio-cni/capture';
import {
  createExecCommandRunner,
  openNetnsOwnerUserns,
  createNetnsDir,
  createNetnsOwnershipCheck,
  createPodNetnsGuard,
  createProcFs,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
  findNetnsByIp,
  listNetnsAddresses,
  type NetnsHandle,
} from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import type { Registry } from 'prom-client';
import { createKubeClient, loadKubeConfig } from '@istio-cni/kube';
import type { Settings } from '../settings/settings.ts';
import { daemonKubeSource } from './daemonKubeSource.ts';
import type { ObjectStore } from '../kube/clusterView.ts';
import { createKubeRepairApi } from './kubeRepairApi.ts';
import type { RepairPod } from './repairPod.ts';
import { brokenPodFilter, createRepairController, repairMode, type RepairController, type RepairInPlace } from './repairController.ts';
import { createRepairMetrics } from './repairMetrics.ts';
import { createInPlaceRepairer } from './repairPodInPlace.ts';
import type { PodWatch } from '../kube/watchCluster.ts';
import { repairFieldSelector, watchRepairPods, type RepairPodWatch } from './watchRepairPods.ts';

export interface StartRepairOptions {
  settings: Settings;
  /** KUBECONFIG for the daemon's own API access; in-cluster credentials otherwise. */
  kubeconfigPath?: string | undefined;
  logger: Logger;
  registry: Registry;
  /**
   * The agent's pod informer: used instead of a second watch of the same pods when repair's
   * selectors (REPAIR_LABEL_SELECTORS, REPAIR_FIELD_SELECTORS and the node) select exactly what it does.
   */
  sharedPods?: PodWatch;
  /** Test hooks. */
  retryDelayMs?: number;
  captureEnv?: Record<string, string | undefined>;
}

export interface RunningRepair {
  controller: RepairController;
  synced: Promise<void>;
  stop(): void;
}

/**
 * Starts the repair controller when REPAIR_ENABLED and a mode is on (upstream `cni/pkg/cmd/root.go` order). It never
 * fails the daemon: without API access or a mode it logs why and returns `undefined`.
 */
export function startRepairController(options: StartRepairOptions): RunningRepair | undefined {
  const { settings } = options;
  const repair = settings.repair;
  const logger = options.logger.with({ component: 'repair' });
  if (!repair.enabled) return undefined;
  const mode = repairMode(repair);
  if (mode === undefined) {
    logger.info('repair controller enabled but REPAIR_REPAIR_PODS, REPAIR_DELETE_PODS and REPAIR_LABEL_PODS are all off: not started');
    return undefined;
  }
  const source = daemonKubeSource(settings, options.kubeconfigPath);
  if (source === undefined) {
    logger.warn('no Kubernetes API configured: repair controller not started');
    return undefined;
  }
  // Upstream watches `spec.nodeName=` (no pod) when REPAIR_NODE_NAME is unset; this node is what is meant.
  // NODE_NAME (downward API) before KUBERNETES_NODE_NAME, which falls back to the container's hostname.
  const nodeName = repair.nodeName || settings.nodeName || settings.k8sNodeName;
  const kube = createKubeClient(loadKubeConfig(source));
  const fieldSelector = repairFieldSelector(repair.fieldSelectors, nodeName);
  const shared = options.sharedPods;
  const sharing = shared !== undefined && repair.labelSelectors === '' && shared.fieldSelector === fieldSelector;
  let watch: RepairPodWatch;
  if (sharing) {
    // The agent's cache holds the whole pod (managedFields aside): every field repair reads is there.
    watch = { pods: shared.store as ObjectStore<RepairPod>, synced: shared.synced, stop: () => undefined };
    logger.info("repair shares the agent's pod informer", { fieldSelector });
  } else {
    watch = watchRepairPods(kube, {
      labelSelector: repair.labelSelectors,
      fieldSelector,
      logger,
      ...(options.retryDelayMs === undefined ? {} : { retryDelayMs: options.retryDelayMs }),
    });
  }
  let repairInPlace: RepairInPlace | undefined;
  if (mode === 'repair') {
    const runner = createExecCommandRunner({ netnsOwner: openNetnsOwnerUserns });
    const procFs = createProcFs(settings.hostProcDir);
    const checkOwnership = createNetnsOwnershipCheck(runner);
    const netnsDir =
      settings.hostNetnsDir === ''
        ? undefined
        : { dir: createNetnsDir(settings.hostNetnsDir), listAddresses: (netns: NetnsHandle) => listNetnsAddresses(runner, netns) };
    const netnsGuard = createPodNetnsGuard({ hostProcDir: settings.hostProcDir });
    const capture = createSidecarCaptureManager({
      runner,
      openScratchNetns: createScratchNetnsOpener(),
      netnsGuard,
      nativeNftables: settings.nativeNftables,
      env: captureEnvironmentFrom(options.captureEnv ?? process.env),
      ...(settings.forceIptablesBinary ? { forceIptablesBinary: settings.forceIptablesBinary } : {}),
    });
    repairInPlace = createInPlaceRepairer({
      findNetns: (ip) =>
        findNetnsByIp({ procFs, checkOwnership, log: (level, msg) => logger[level](msg), ...(netnsDir ? { netnsDir } : {}) }, ip),
      checkNetns: (netns) => netnsGuard.check(netns),
      capture,
    });
  }
  const controller = createRepairController({
    mode,
    filter: brokenPodFilter(repair),
    labelKey: repair.brokenPodLabelKey,
    labelValue: repair.brokenPodLabelValue,
    api: createKubeRepairApi(kube, { nodeName }),
    ...(repairInPlace ? { repairInPlace } : {}),
    getPod: (key) => {
      const slash = key.indexOf('/');
      return watch.pods.get(key.slice(0, slash), key.slice(slash + 1));
    },
    metrics: createRepairMetrics(options.registry),
    logger,
    ...(options.retryDelayMs === undefined ? {} : { queue: { retryDelayMs: options.retryDelayMs } }),
  });
  watch.pods.onChange((_type, pod) => controller.podChanged(pod));
  // A shared informer may have listed the node's pods before this subscription: those already
  // broken would otherwise wait for their next status change.
  if (sharing) for (const pod of watch.pods.list()) controller.podChanged(pod);
  void watch.synced.then(() => logger.info('repair controller started', { mode, node: nodeName }));
  return {
    controller,
    synced: watch.synced,
    stop() {
      watch.stop();
      controller.stop();
    },
  };
}
