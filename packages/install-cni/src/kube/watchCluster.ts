import {
  ADD,
  CoreV1Api,
  DELETE,
  ERROR,
  ListWatch,
  UPDATE,
  Watch,
  type KubeConfig,
  type KubernetesObject,
  type KubernetesListObject,
} from '@kubernetes/client-node';
import type { Namespace, Pod } from '@istio-cni/capture';
import type { Logger } from '@istio-cni/handoff';
import { ObjectStore, type ClusterView, type KubeReader } from './clusterView.ts';

export interface WatchClusterOptions {
  nodeName: string;
  logger: Logger;
  /** First delay before restarting a failed watch; doubles up to 30 s. */
  retryDelayMs?: number;
}

export interface ClusterWatch {
  view: ClusterView;
  reader: KubeReader;
  /** Resolves once pods and namespaces are listed (informers synced). */
  synced: Promise<void>;
  stop(): void;
}

const MAX_RETRY_DELAY_MS = 30_000;

function isNotFound(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: number }).code === 404;
}

/**
 * Drops `metadata.managedFields` (often a third of a pod's JSON, never read here) from a cached
 * object. The same object sits in client-node's own cache, so both shrink.
 */
function slim(o: KubernetesObject): KubernetesObject {
  if (o.metadata && 'managedFields' in o.metadata) delete (o.metadata as { managedFields?: unknown }).managedFields;
  return o;
}

/**
 * Informers for the pods of this node (field selector `spec.nodeName=<node>`) and all namespaces.
 * client-node's ListWatch re-lists after `410 Gone` and diffs the new list against its cache (so a
 * pod deleted during a disconnect still produces a delete); any other failure stops it, and we
 * restart it with backoff so API restarts and disconnects recover by themselves.
 */
export function watchCluster(kc: KubeConfig, options: WatchClusterOptions): ClusterWatch {
  const core = kc.makeApiClient(CoreV1Api);
  const pods = new ObjectStore<Pod>();
  const namespaces = new ObjectStore<Namespace>();
  const fieldSelector = `spec.nodeName=${options.nodeName}`;
  const watch = new Watch(kc);
  const stoppers: (() => void)[] = [];
  let podsSynced = false;
  let namespacesSynced = false;

  function informer<T extends Pod | Namespace>(
    what: string,
    path: string,
    list: () => Promise<KubernetesListObject<KubernetesObject>>,
    store: ObjectStore<T>,
    selector: string | undefined,
    onSynced: () => void,
  ): Promise<void> {
    let delay = options.retryDelayMs ?? 1000;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    const listFn = async () => {
      const result = await list();
      delay = options.retryDelayMs ?? 1000;
      return result;
    };
    const lw = new ListWatch<KubernetesObject>(path, watch, listFn, false, undefined, selector);
    lw.on(ADD, (o) => store.upsert(slim(o) as unknown as T));
    lw.on(UPDATE, (o) => store.upsert(slim(o) as unknown as T));
    lw.on(DELETE, (o) => store.delete(o as unknown as T));
    return new Promise<void>((resolve) => {
      lw.on(ERROR, (err) => {
        if (stopped) return;
        options.logger.warn(`${what} watch failed; restarting`, { error: String((err as Error)?.message ?? err), retryInMs: delay });
        timer = setTimeout(() => {
          lw.start().then(() => {
            onSynced();
            resolve();
          }, () => {});
        }, delay);
        delay = Math.min(delay * 2, MAX_RETRY_DELAY_MS);
      });
      stoppers.push(() => {
        stopped = true;
        clearTimeout(timer);
        lw.stop();
      });
      // start() resolves after the initial list has been applied to the cache.
      lw.start().then(
        () => {
          onSynced();
          resolve();
        },
        () => {},
      );
    });
  }

  const synced = Promise.all([
    informer(
      'pod',
      '/api/v1/pods',
      () => core.listPodForAllNamespaces({ fieldSelector }) as unknown as Promise<KubernetesListObject<KubernetesObject>>,
      pods,
      fieldSelector,
      () => (podsSynced = true),
    ),
    informer(
      'namespace',
      '/api/v1/namespaces',
      () => core.listNamespace() as unknown as Promise<KubernetesListObject<KubernetesObject>>,
      namespaces,
      undefined,
      () => (namespacesSynced = true),
    ),
  ]).then(() => {
    options.logger.info('pod and namespace informers synced', { node: options.nodeName });
  });

  const view: ClusterView = {
    getPod: (ns, name) => pods.get(ns, name),
    getNamespace: (name) => namespaces.get(undefined, name),
    listPods: () => pods.list(),
    isSynced: () => podsSynced && namespacesSynced,
    onPodChange: (h) => pods.onChange(h),
    onNamespaceChange: (h) => namespaces.onChange(h),
  };

  const reader: KubeReader = {
    async getPod(namespace, name) {
      try {
        return (await core.readNamespacedPod({ name, namespace })) as unknown as Pod;
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
    async getNamespace(name) {
      try {
        return (await core.readNamespace({ name })) as unknown as Namespace;
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
  };

  return { view, reader, synced, stop: () => stoppers.forEach((s) => s()) };
}
