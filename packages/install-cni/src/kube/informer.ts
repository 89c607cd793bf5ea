import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { ObjectStore } from './clusterView.ts';
import { Backoff, KubeApiError, type KubeClient, type WatchEvent } from '@istio-cni/kube';

type Meta = { metadata: { name?: string; namespace?: string; resourceVersion?: string } };

export interface InformerOptions<T extends Meta> {
  /** For logs: "pod", "namespace". */
  what: string;
  /** Collection path, e.g. `/api/v1/pods`. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  store: ObjectStore<T>;
  logger: Logger;
  /** First delay before retrying after a failure; doubles (jittered) up to 30 s. */
  retryDelayMs?: number;
}

export interface Informer {
  /** Resolves once the first list is in the store. */
  synced: Promise<void>;
  stop(): void;
}

const MAX_RETRY_DELAY_MS = 30_000;
const LIST_PAGE = 500;

/** Drops `metadata.managedFields` (often a third of a pod's JSON, never read here). */
function slim<T extends Meta>(o: T): T {
  if ('managedFields' in o.metadata) delete (o.metadata as { managedFields?: unknown }).managedFields;
  return o;
}

function keyOf(o: Meta): string {
  return `${o.metadata.namespace ?? ''}/${o.metadata.name ?? ''}`;
}

function isGone(err: unknown): boolean {
  return err instanceof KubeApiError && err.code === 410;
}

/**
 * List, then watch from the list's resourceVersion, client-go style: a watch the server ends is
 * resumed from the last resourceVersion seen (bookmarks included); `410 Gone` (history compacted)
 * re-lists and diffs the list against the store, so an object deleted meanwhile still produces a
 * delete and an unchanged one produces nothing; any other failure is retried with backoff.
 */
export function runInformer<T extends Meta>(client: KubeClient, options: InformerOptions<T>): Informer {
  const { store, logger, what } = options;
  const initialDelay = options.retryDelayMs ?? 1000;
  const selectors = { labelSelector: options.labelSelector, fieldSelector: options.fieldSelector };
  let stopped = false;
  let current: { stop(): void } | undefined;
  let sleeping: { timer: NodeJS.Timeout; wake: () => void } | undefined;
  let markSynced!: () => void;
  const synced = new Promise<void>((resolve) => (markSynced = resolve));

  async function list(): Promise<string> {
    const items: T[] = [];
    let cont: string | undefined;
    let resourceVersion = '';
    do {
      const page = await client.request<{ metadata?: { resourceVersion?: string; continue?: string }; items?: T[] }>({
        method: 'GET',
        path: options.path,
        query: { ...selectors, limit: String(LIST_PAGE), continue: cont },
      });
      for (const item of page.items ?? []) items.push(slim(item));
      resourceVersion = page.metadata?.resourceVersion ?? '';
      cont = page.metadata?.continue || undefined;
    } while (cont !== undefined && !stopped);
    const seen = new Set<string>();
    for (const item of items) {
      seen.add(keyOf(item));
      const cached = store.get(item.metadata.namespace, item.metadata.name ?? '');
      if (cached === undefined || cached.metadata.resourceVersion !== item.metadata.resourceVersion) store.upsert(item);
    }
    for (const cached of store.list()) if (!seen.has(keyOf(cached))) store.delete(cached);
    return resourceVersion;
  }

  function apply(event: WatchEvent): string | undefined {
    const object = event.object as unknown as T;
    if (event.type === 'ADDED' || event.type === 'MODIFIED') store.upsert(slim(object));
    else if (event.type === 'DELETED') store.delete(object);
    return object.metadata?.resourceVersion;
  }

  function sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      sleeping = { timer: setTimeout(resolve, ms), wake: () => resolve() };
    }).then(() => {
      sleeping = undefined;
    });
  }

  async function loop(): Promise<void> {
    const backoff = new Backoff({ initialMs: initialDelay, maxMs: MAX_RETRY_DELAY_MS });
    let resourceVersion: string | undefined;
    while (!stopped) {
      try {
        if (resourceVersion === undefined) {
          resourceVersion = await list();
          markSynced();
          backoff.reset();
        }
        if (stopped) break;
        // The server ends the watch after timeoutSeconds (5–10 min, spread like client-go's).
        const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
        const stream = client.watch(
          options.path,
          { ...selectors, resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds: String(timeoutSeconds) },
          (event) => {
            resourceVersion = apply(event) ?? resourceVersion;
          },
          (timeoutSeconds + 30) * 1000,
        );
        current = stream;
        const started = Date.now();
        await stream.done;
        if (Date.now() - started < 1000) {
          // A server that ends every watch at once must not turn this loop into a busy one.
          await sleep(backoff.next());
        } else {
          backoff.reset();
        }
      } catch (err) {
        if (stopped) break;
        if (isGone(err)) {
          logger.info(`${what} watch history expired; re-listing`);
          resourceVersion = undefined;
          continue;
        }
        // A 429's Retry-After is a floor (the client has already retried the list within its deadline).
        const delay = Math.max(backoff.next(), err instanceof KubeApiError ? (err.retryAfterMs ?? 0) : 0);
        logger.warn(`${what} watch failed; restarting`, { error: errorMessage(err), retryInMs: delay });
        await sleep(delay);
      } finally {
        current = undefined;
      }
    }
  }

  void loop();
  return {
    synced,
    stop() {
      stopped = true;
      current?.stop();
      if (sleeping) {
        clearTimeout(sleeping.timer);
        sleeping.wake();
      }
    },
  };
}
