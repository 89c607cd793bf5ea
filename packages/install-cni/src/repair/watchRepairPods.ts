import { ADD, CoreV1Api, DELETE, ERROR, ListWatch, UPDATE, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '@istio-cni/handoff';
import { ObjectStore } from '../kube/clusterView.ts';
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

const MAX_RETRY_DELAY_MS = 30_000;

/** Upstream always appends the node, so the controller only ever sees this node's pods. */
export function repairFieldSelector(fieldSelectors: string, nodeName: string): string {
  return [...(fieldSelectors === '' ? [] : [fieldSelectors]), `spec.nodeName=${nodeName}`].join(',');
}

/**
 * A pod informer with the repair controller's own selectors (SPEC 6), separate from the agent's.
 * Like `watchCluster`, a failed ListWatch is restarted with backoff so API outages heal.
 */
export function watchRepairPods(kc: KubeConfig, options: RepairPodWatchOptions): RepairPodWatch {
  const core = kc.makeApiClient(CoreV1Api);
  const pods = new ObjectStore<RepairPod>();
  const labelSelector = options.labelSelector === '' ? undefined : options.labelSelector;
  const { fieldSelector } = options;
  let delay = options.retryDelayMs ?? 1000;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const list = async () => {
    const result = await core.listPodForAllNamespaces({ fieldSelector, ...(labelSelector ? { labelSelector } : {}) });
    delay = options.retryDelayMs ?? 1000;
    return result as unknown as KubernetesListObject<KubernetesObject>;
  };
  const lw = new ListWatch<KubernetesObject>('/api/v1/pods', new Watch(kc), list, false, labelSelector, fieldSelector);
  lw.on(ADD, (o) => pods.upsert(o as unknown as RepairPod));
  lw.on(UPDATE, (o) => pods.upsert(o as unknown as RepairPod));
  lw.on(DELETE, (o) => pods.delete(o as unknown as RepairPod));
  const synced = new Promise<void>((resolve) => {
    lw.on(ERROR, (err) => {
      if (stopped) return;
      options.logger.warn('repair pod watch failed; restarting', { error: String((err as Error)?.message ?? err), retryInMs: delay });
      timer = setTimeout(() => lw.start().then(resolve, () => {}), delay);
      delay = Math.min(delay * 2, MAX_RETRY_DELAY_MS);
    });
    // start() resolves after the initial list has been applied to the cache.
    lw.start().then(resolve, () => {});
  });
  return {
    pods,
    synced,
    stop() {
      stopped = true;
      clearTimeout(timer);
      void lw.stop();
    },
  };
}
