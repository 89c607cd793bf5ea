import type { Namespace, Pod } from '@istio-cni/capture';

export type ChangeType = 'add' | 'update' | 'delete';

/** `old` is the previous cached copy (update, delete) — upstream's informer handlers get both. */
export type ChangeHandler<T> = (type: ChangeType, object: T, old: T | undefined) => void;

/**
 * What the agent knows about the cluster: a watch-fed cache of the pods on this node and of all
 * namespaces. Decisions read it synchronously; nothing on the ADD path waits for the API.
 * Implemented for real by `watchCluster` and by fakes in tests.
 */
export interface ClusterView {
  getPod(namespace: string, name: string): Pod | undefined;
  getNamespace(name: string): Namespace | undefined;
  listPods(): Pod[];
  /** True once the initial lists of pods and namespaces are in the cache. */
  isSynced(): boolean;
  onPodChange(handler: ChangeHandler<Pod>): void;
  onNamespaceChange(handler: ChangeHandler<Namespace>): void;
}

/** Direct reads, for a pod the cache has not seen yet (fetched once, docs/architecture.md "Hand-off protocol"). */
export interface KubeReader {
  /** `undefined` when the pod does not exist. */
  getPod(namespace: string, name: string): Promise<Pod | undefined>;
  getNamespace(name: string): Promise<Namespace | undefined>;
}

function key(namespace: string | undefined, name: string): string {
  return `${namespace ?? ''}/${name}`;
}

/**
 * A keyed object cache that remembers the previous copy of each object and fans changes out to
 * handlers. Used by the real informers and by the test fakes, so both behave the same.
 */
export class ObjectStore<T extends { metadata: { name?: string; namespace?: string } }> {
  readonly #objects = new Map<string, T>();
  readonly #handlers: ChangeHandler<T>[] = [];

  get(namespace: string | undefined, name: string): T | undefined {
    return this.#objects.get(key(namespace, name));
  }

  list(): T[] {
    return [...this.#objects.values()];
  }

  onChange(handler: ChangeHandler<T>): void {
    this.#handlers.push(handler);
  }

  upsert(object: T): void {
    const k = key(object.metadata.namespace, object.metadata.name ?? '');
    const old = this.#objects.get(k);
    this.#objects.set(k, object);
    this.#emit(old === undefined ? 'add' : 'update', object, old);
  }

  delete(object: T): void {
    const k = key(object.metadata.namespace, object.metadata.name ?? '');
    const old = this.#objects.get(k);
    this.#objects.delete(k);
    this.#emit('delete', old ?? object, old);
  }

  #emit(type: ChangeType, object: T, old: T | undefined): void {
    for (const h of this.#handlers) h(type, object, old);
  }
}
