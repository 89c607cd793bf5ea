import type { Logger } from '@istio-cni/handoff';
import { ObjectStore } from '../kube/clusterView.ts';
import { POD_TYPE } from '../kube/coreV1Schemas.ts';
import { runInformer } from '../kube/informer.ts';
import type { KubeClient } from '@istio-cni/kube';
import type { RepairPod } from './repairPod.ts';

export interface RepairPodWatchOptions {
  /** REPAIR_LABEL_SELECTORS; empty = every pod. */
  labelSelector: string;
  /** REPAIR_FIELD_SELECTORS plus `spec.nodeName=<node>` (see {@link repairFieldSelector}). */
  fieldSelector: string;
  logger: Logger;
  /** First delay before restarting a failed watch; doubles up to 30 s. */
  retryDelayMs?: number;
}

export interface RepairPodWatch {
  pods: ObjectStore<RepairPod>;
  /** Resolves once the first list is in the cache. */
  synced: Promise<void>;
  stop(): void;
}

/** Upstream always appends the node, so the controller only ever sees this node's pods. */
export function repairFieldSelector(fieldSelectors: string, nodeName: string): string {
  return [...(fieldSelectors === '' ? [] : [fieldSelectors]), `spec.nodeName=${nodeName}`].join(',');
}

/** A pod informer with the repair controller's own selectors (upstream `cni/pkg/repair`), separate from the agent's. */
export function watchRepairPods(client: KubeClient, options: RepairPodWatchOptions): RepairPodWatch {
  const pods = new ObjectStore<RepairPod>();
  const informer = runInformer(client, {
    what: 'repair pod',
    path: '/api/v1/pods',
    fieldSelector: options.fieldSelector,
    ...(options.labelSelector === '' ? {} : { labelSelector: options.labelSelector }),
    store: pods,
    protobuf: POD_TYPE,
    logger: options.logger,
    ...(options.retryDelayMs === undefined ? {} : { retryDelayMs: options.retryDelayMs }),
  });
  return { pods, synced: informer.synced, stop: () => informer.stop() };
}
