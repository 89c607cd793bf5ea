import { ambientEnabledFor, namespaceSelectedForAmbient, type EnablementSelector, type Namespace, type Pod } from '@istio-cni/capture';
import { PodNetnsRefusedError } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { ClusterView } from '../kube/clusterView.ts';
import { NonRetryableError, isTerminal, podIps, redirectionState, type MeshDataplane } from './meshDataplane.ts';
import { createWorkQueue, type WorkQueue, type WorkQueueOptions } from '../workQueue.ts';

export interface AmbientPolicy {
  selectors: readonly EnablementSelector[];
  excludeNamespaces: readonly string[];
  /** SYSTEM_NAMESPACE: where ztunnel runs. */
  systemNamespace: string;
}

export type ReconcileEvent =
  | { type: 'update'; namespace: string; name: string; old: Pod | undefined }
  | { type: 'delete'; namespace: string; name: string; pod: Pod };

export interface AmbientReconcilerDeps {
  view: ClusterView;
  dataplane: MeshDataplane;
  policy: AmbientPolicy;
  logger: Logger;
  /** `nodeagent_reconcile_events_total{type}`. */
  countEvent?(type: 'add' | 'update' | 'delete'): void;
  queue?: Partial<Omit<WorkQueueOptions<ReconcileEvent>, 'process' | 'keyOf'>>;
}

/**
 * Like client-go's default controller rate limiter: 5 ms → 5 s per pod, 10/s with burst 100
 * overall. Attempts are unlimited: ztunnel may connect at any time.
 */
const AMBIENT_QUEUE = {
  retryDelayMs: 5,
  maxRetryDelayMs: 5_000,
  rate: { perSecond: 10, burst: 100 },
};

export function isZtunnelPod(pod: Pod, systemNamespace: string): boolean {
  return pod.metadata.namespace === systemNamespace && pod.metadata.labels?.app === 'ztunnel';
}

/** Whether the pod should be in the mesh now: selected and not in an excluded namespace. */
export function shouldBeEnrolled(pod: Pod, namespace: Namespace | undefined, policy: AmbientPolicy): boolean {
  if (policy.excludeNamespaces.includes(pod.metadata.namespace ?? '')) return false;
  return ambientEnabledFor(pod, namespace, policy.selectors);
}

function sameIps(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && [...a].sort().join(',') === [...b].sort().join(',');
}

export interface AmbientReconciler {
  /** Registers the informer handlers; events queue up from then on. */
  start(): void;
  /** Queues every (non-ztunnel) pod of the node once: the start-up pass over existing pods. */
  resyncAll(): void;
  stop(): void;
  /** Exported for testing purposes only. */
  queue: WorkQueue<ReconcileEvent>;
  process(event: ReconcileEvent): Promise<void>;
}

/**
 * Keeps enrolment in line with the cluster (upstream `informers.go`): namespace and pod label changes, terminal
 * pods, deletions and IP changes. Pod updates act on the *current* cached pod, so stale events do
 * nothing; every step is idempotent because retries are unlimited.
 */
export function createAmbientReconciler(deps: AmbientReconcilerDeps): AmbientReconciler {
  const { view, dataplane, policy } = deps;
  const log = deps.logger;

  async function processUpdate(event: Extract<ReconcileEvent, { type: 'update' }>): Promise<void> {
    const current = view.getPod(event.namespace, event.name);
    if (current === undefined) return;
    const plog = log.with({ pod: `${event.namespace}/${event.name}` });
    const state = redirectionState(current);
    const enrolled = state === 'enabled';
    const pending = state === 'pending';
    const namespace = view.getNamespace(event.namespace);
    const terminal = isTerminal(current);
    if (namespace === undefined && !terminal) {
      // A pod exists only in a namespace that exists: this cache has not seen it yet (its watch lags
      // the pods', the CNI ADD read it directly). Deciding without it would take a pod out of the
      // mesh because of a cache; the namespace's arrival queues its pods again.
      plog.debug('namespace not in the cache yet; the pod is looked at again when it arrives');
      return;
    }
    const should = shouldBeEnrolled(current, namespace, policy);

    if ((enrolled || pending) && terminal) {
      // The old object still has the IPs: kubelet briefly posts terminal status without them
      // (kubernetes#125370).
      plog.info('pod is terminal; removing it from the mesh');
      await dataplane.removePodFromMesh(event.old ?? current, true);
      return;
    }
    const ips = podIps(current);
    if ((enrolled || pending) && should && !terminal && ips.length > 0) {
      // The start-up resync too: a pod whose sandbox came back while the start-up reconciliation
      // scanned /proc has had its status update before these handlers were registered.
      if (!current.metadata.deletionTimestamp && !dataplane.holdsNetns(current.metadata.uid ?? '')) {
        // The annotation outlived what it describes: a reboot, or a sandbox re-created by an ADD
        // that did not reach this agent (istio-cni missing from the chain). Trusting it would leave
        // the pod looking meshed while uncaptured (docs/architecture.md "Reboot without drain").
        plog.warn('pod is annotated as enrolled but this agent holds no network namespace for it; enrolling it again', {
          annotation: state,
        });
        return enrol(current, ips, plog);
      }
      if (event.old !== undefined && !sameIps(podIps(event.old), ips)) await dataplane.syncPodIps(current, ips);
    }
    if ((enrolled === should && !pending) || terminal) return;
    if (!should) {
      // Why, in the terms an operator changes: the namespace's selection and the pod's own label.
      plog.info('pod no longer selected for ambient; removing it from the mesh', {
        namespaceSelected: namespace !== undefined && namespaceSelectedForAmbient(namespace, policy.selectors),
        excluded: policy.excludeNamespaces.includes(event.namespace),
        podLabel: current.metadata.labels?.['istio.io/dataplane-mode'] ?? null,
      });
      await dataplane.removePodFromMesh(current, false);
      return;
    }
    if (ips.length === 0) {
      plog.debug('pod has no IP yet; enrolment waits for one');
      return;
    }
    return enrol(current, ips, plog);
  }

  async function enrol(current: Pod, ips: readonly string[], plog: Logger): Promise<void> {
    try {
      await dataplane.addPodToMesh(current, ips, undefined);
      plog.info('pod enrolled in ambient mode');
    } catch (err) {
      if (err instanceof NonRetryableError || err instanceof PodNetnsRefusedError) {
        plog.error('pod cannot be enrolled; not retrying', { error: err.message });
        return;
      }
      throw err;
    }
  }

  async function process(event: ReconcileEvent): Promise<void> {
    if (event.type === 'update') return processUpdate(event);
    const pod = event.pod;
    const state = redirectionState(pod);
    // Exclusion does not matter here: whatever might have been enrolled is cleaned up.
    if (
      state !== undefined ||
      dataplane.holdsNetns(pod.metadata.uid ?? '') ||
      ambientEnabledFor(pod, view.getNamespace(event.namespace), policy.selectors)
    ) {
      log.info('pod deleted; removing it from the mesh', { pod: `${event.namespace}/${event.name}` });
      await dataplane.removePodFromMesh(pod, true);
    }
  }

  const queue = createWorkQueue<ReconcileEvent>({
    ...AMBIENT_QUEUE,
    ...deps.queue,
    keyOf: (e) => `${e.namespace}/${e.name}`,
    process,
    onError: (e, err) =>
      log.warn('ambient reconcile failed; will retry', {
        pod: `${e.namespace}/${e.name}`,
        event: e.type,
        error: errorMessage(err),
      }),
  });

  const enqueueNamespacePods = (namespace: string) => {
    for (const pod of view.listPods()) {
      if (pod.metadata.namespace !== namespace || isZtunnelPod(pod, policy.systemNamespace)) continue;
      queue.add({ type: 'update', namespace, name: pod.metadata.name ?? '', old: undefined });
    }
  };

  let started = false;
  return {
    queue,
    process,
    start() {
      if (started) return;
      started = true;
      view.onNamespaceChange((type, ns, old) => {
        const name = ns.metadata.name ?? '';
        if (type === 'delete') return;
        const selected = namespaceSelectedForAmbient(ns, policy.selectors);
        if (selected && policy.excludeNamespaces.includes(name)) {
          log.warn('namespace is labelled for ambient but excluded; its pods are not enrolled', { namespace: name });
        }
        if (type === 'add' || old === undefined || namespaceSelectedForAmbient(old, policy.selectors) !== selected) {
          enqueueNamespacePods(name);
        }
      });
      view.onPodChange((type, pod, old) => {
        const namespace = pod.metadata.namespace ?? '';
        const name = pod.metadata.name ?? '';
        deps.countEvent?.(type);
        if (type === 'update') queue.add({ type: 'update', namespace, name, old });
        else if (type === 'delete') queue.add({ type: 'delete', namespace, name, pod });
        // New pods arrive through the CNI ADD; existing ones through the snapshot and namespaces.
      });
    },
    resyncAll() {
      for (const pod of view.listPods()) {
        if (isZtunnelPod(pod, policy.systemNamespace)) continue;
        queue.add({ type: 'update', namespace: pod.metadata.namespace ?? '', name: pod.metadata.name ?? '', old: undefined });
      }
    },
    stop: () => queue.stop(),
  };
}
