import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { RepairSettings } from '../settings/settings.ts';
import { type BrokenPodFilter, isBrokenPod } from './detectBrokenPod.ts';
import type { RepairApi } from './repairApi.ts';
import type { RepairMetrics } from './repairMetrics.ts';
import { podKey, type RepairPod } from './repairPod.ts';
import { createWorkQueue, type WorkQueueOptions } from '../workQueue.ts';

export type RepairMode = 'repair' | 'delete' | 'label';

export const REASON_REPAIR_BROKEN_POD = 'RepairBrokenPod';
export const REASON_DELETE_BROKEN_POD = 'DeleteBrokenPod';
export const REASON_LABEL_BROKEN_POD = 'LabelBrokenPod';

/** Upstream precedence: repair in place > delete > label; `undefined` when none is on. */
export function repairMode(s: Pick<RepairSettings, 'repairPods' | 'deletePods' | 'labelPods'>): RepairMode | undefined {
  if (s.repairPods) return 'repair';
  if (s.deletePods) return 'delete';
  if (s.labelPods) return 'label';
  return undefined;
}

export function brokenPodFilter(s: RepairSettings): BrokenPodFilter {
  return {
    sidecarAnnotation: s.sidecarAnnotation,
    initContainerName: s.initContainerName,
    initContainerTerminationMessage: s.initContainerTerminationMessage,
    initContainerExitCode: s.initContainerExitCode,
  };
}

/** Programs the pod's capture rules inside its running netns; resolves with a description of that netns. */
export type RepairInPlace = (pod: RepairPod) => Promise<string>;

export interface RepairControllerOptions {
  mode: RepairMode;
  filter: BrokenPodFilter;
  labelKey: string;
  labelValue: string;
  api: RepairApi;
  /** Required for mode `repair`. */
  repairInPlace?: RepairInPlace;
  /** The informer cache: the newest copy of a pod, `undefined` once it is gone. */
  getPod(key: string): RepairPod | undefined;
  metrics: RepairMetrics;
  logger: Logger;
  queue?: Partial<Omit<WorkQueueOptions<string>, 'process' | 'keyOf' | 'onDrop'>>;
}

export interface RepairController {
  /** Informer handler: every add, update and delete queues the pod's key. */
  podChanged(pod: RepairPod): void;
  /** One reconcile of `namespace/name` against the cache (what the queue runs). */
  reconcile(key: string): Promise<void>;
  /** Resolves once the queue has nothing left to do (tests). */
  idle(): Promise<void>;
  stop(): void;
}

/** One pod at a time, each pod (its `namespace/name` key) given up after 5 attempts like upstream. */
const REPAIR_QUEUE = {
  concurrency: 1,
  maxAttempts: 5,
  /** Each pod on the node is at most one key. */
  maxQueued: 10_000,
  retryDelayMs: 1000,
  maxRetryDelayMs: 60_000,
};

/**
 * The repair controller (upstream `cni/pkg/repair/`). Each pod (by UID) is acted on at most once: a repair only takes
 * effect on the pod's next crash-loop restart, and the updates in between must not reprogram or
 * delete it again. Nothing here throws out of the queue: failures are retried, logged with the
 * pod's name, counted, and dropped after the last attempt.
 */
export function createRepairController(options: RepairControllerOptions): RepairController {
  const { api, metrics, mode } = options;
  if (mode === 'repair' && options.repairInPlace === undefined) throw new Error('repair mode needs an in-place repairer');
  /** key → UID of the pod already handled under that name. */
  const handled = new Map<string, string>();

  const event = async (pod: RepairPod, reason: string, text: string, log: Logger): Promise<void> => {
    try {
      await api.recordEvent(pod, 'Warning', reason, text);
    } catch (err) {
      log.warn('failed to record event', { reason, error: errorMessage(err) });
    }
  };

  async function repair(pod: RepairPod, log: Logger): Promise<void> {
    log.info('pod detected as broken, repairing in place');
    let netns: string;
    try {
      netns = await (options.repairInPlace as RepairInPlace)(pod);
    } catch (err) {
      metrics.podRepaired('repair', 'fail');
      log.error('failed to repair pod in place', { error: errorMessage(err) });
      await event(pod, REASON_REPAIR_BROKEN_POD, `pod detected as broken, but failed to repair: ${errorMessage(err)}`, log);
      throw err;
    }
    metrics.podRepaired('repair', 'success');
    log.info('pod repaired: traffic capture programmed; it recovers on its next restart', { netns });
    await event(pod, REASON_REPAIR_BROKEN_POD, 'pod detected as broken, traffic capture programmed in place', log);
  }

  async function remove(pod: RepairPod, log: Logger): Promise<void> {
    log.info('pod detected as broken, deleting');
    try {
      await api.deletePod(pod);
    } catch (err) {
      metrics.podRepaired('delete', 'fail');
      log.error('failed to delete broken pod', { error: errorMessage(err) });
      await event(pod, REASON_DELETE_BROKEN_POD, `pod detected as broken, but failed to delete: ${errorMessage(err)}`, log);
      throw err;
    }
    metrics.podRepaired('delete', 'success');
    await event(pod, REASON_DELETE_BROKEN_POD, 'pod detected as broken, deleted', log);
  }

  async function label(pod: RepairPod, log: Logger): Promise<void> {
    if (Object.hasOwn(pod.metadata.labels ?? {}, options.labelKey)) {
      metrics.podRepaired('label', 'skip');
      log.info('broken pod already has the label, skipping', { label: options.labelKey });
      return;
    }
    log.info('pod detected as broken, adding label', { label: `${options.labelKey}=${options.labelValue}` });
    try {
      await api.labelPod(pod, options.labelKey, options.labelValue);
    } catch (err) {
      metrics.podRepaired('label', 'fail');
      log.error('failed to label broken pod', { error: errorMessage(err) });
      await event(pod, REASON_LABEL_BROKEN_POD, `pod detected as broken, but failed to label: ${errorMessage(err)}`, log);
      throw err;
    }
    metrics.podRepaired('label', 'success');
    await event(pod, REASON_LABEL_BROKEN_POD, 'pod detected as broken, labeled', log);
  }

  async function reconcile(key: string): Promise<void> {
    const pod = options.getPod(key);
    if (pod === undefined) {
      handled.delete(key);
      return;
    }
    if (!isBrokenPod(pod, options.filter)) return;
    const log = options.logger.with({ pod: key });
    const uid = pod.metadata.uid ?? '';
    const previous = handled.get(key);
    if (previous === uid) {
      log.debug('skipping pod, already handled');
      return;
    }
    if (previous !== undefined) {
      // The old pod's deletion was missed; this is a new pod that needs its own repair.
      log.warn('pod was re-created under the same name; handling the new one', { previousUid: previous, uid });
    }
    if (pod.metadata.deletionTimestamp !== undefined) {
      log.debug('skipping broken pod that is already terminating');
      return;
    }
    if (mode === 'repair') await repair(pod, log);
    else if (mode === 'delete') await remove(pod, log);
    else await label(pod, log);
    handled.set(key, uid);
  }

  const queue = createWorkQueue<string>({
    ...REPAIR_QUEUE,
    ...options.queue,
    keyOf: (key) => key,
    process: reconcile,
    onDrop: (key, reason, err) =>
      options.logger.error('giving up on pod', { pod: key, reason, ...(err === undefined ? {} : { error: errorMessage(err) }) }),
  });

  return {
    podChanged: (pod) => void queue.add(podKey(pod)),
    reconcile,
    idle: () => queue.idle(),
    stop: () => queue.stop(),
  };
}
