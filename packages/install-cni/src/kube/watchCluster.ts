import type { Namespace, Pod } from '@istio-cni/capture';
import type { Logger } from '@istio-cni/handoff';
import { ObjectStore, type ClusterView, type KubeReader } from './clusterView.ts';
import { NAMESPACE_TYPE, POD_TYPE } from './coreV1Schemas.ts';
import { runInformer } from './informer.ts';
import { getOrUndefined, namespacePath, podPath, type KubeClient } from '@istio-cni/kube';

export interface WatchClusterOptions {
  nodeName: string;
  logger: Logger;
  /** First delay before restarting a failed watch; doubles up to 30 s. */
  retryDelayMs?: number;
  /**
   * Watch namespaces too (default true). Only ambient decisions read them (the enablement
   * selector); without ambient the agent holds one watch, as upstream does.
   */
  namespaces?: boolean;
}

/** The pod informer's cache and selector, for another consumer with the same selector to share (repair). */
export interface PodWatch {
  fieldSelector: string;
  store: ObjectStore<Pod>;
  synced: Promise<void>;
}

export interface ClusterWatch {
  view: ClusterView;
  pods: PodWatch;
  reader: KubeReader;
  /** Resolves once pods and namespaces are listed (informers synced). */
  synced: Promise<void>;
  stop(): void;
}

/** Informers for the pods of this node (field selector `spec.nodeName=<node>`) and, unless turned off, all namespaces. */
export function watchCluster(client: KubeClient, options: WatchClusterOptions): ClusterWatch {
  const pods = new ObjectStore<Pod>();
  const namespaces = new ObjectStore<Namespace>();
  let podsSynced = false;
  let namespacesSynced = false;
  const common = { logger: options.logger, ...(options.retryDelayMs === undefined ? {} : { retryDelayMs: options.retryDelayMs }) };
  const podFieldSelector = `spec.nodeName=${options.nodeName}`;
  const podInformer = runInformer(client, {
    ...common,
    what: 'pod',
    path: '/api/v1/pods',
    fieldSelector: podFieldSelector,
    store: pods,
    protobuf: POD_TYPE,
  });
  const namespaceInformer =
    (options.namespaces ?? true)
      ? runInformer(client, { ...common, what: 'namespace', path: '/api/v1/namespaces', store: namespaces, protobuf: NAMESPACE_TYPE })
      : undefined;
  const synced = Promise.all([
    podInformer.synced.then(() => {
      podsSynced = true;
    }),
    (namespaceInformer?.synced ?? Promise.resolve()).then(() => {
      namespacesSynced = true;
    }),
  ]).then(() => {
    options.logger.info('informers synced', { node: options.nodeName, watches: namespaceInformer ? ['pods', 'namespaces'] : ['pods'] });
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
    getPod: (namespace, name) => getOrUndefined<Pod>(client, podPath(namespace, name)),
    getNamespace: (name) => getOrUndefined<Namespace>(client, namespacePath(name)),
  };

  return {
    view,
    pods: { fieldSelector: podFieldSelector, store: pods, synced: podInformer.synced },
    reader,
    synced,
    stop() {
      podInformer.stop();
      namespaceInformer?.stop();
    },
  };
}
