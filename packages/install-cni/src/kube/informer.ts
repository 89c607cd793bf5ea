import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { ObjectStore } from './clusterView.ts';
import {
  Backoff,
  KubeApiError,
  monotonicNow,
  projectJson,
  type KubeClient,
  type ProtobufObjectType,
  type WatchEvent,
} from '@istio-cni/kube';

type Meta = { metadata: { name?: string; namespace?: string; resourceVersion?: string; annotations?: Record<string, string> } };

export interface InformerOptions<T extends Meta> {
  /** For logs: "pod", "namespace". */
  what: string;
  /** Collection path, e.g. `/api/v1/pods`. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  store: ObjectStore<T>;
  /**
   * The objects' protobuf type: the watch asks for protobuf and keeps only its fields, from a
   * JSON answer or list too. Without it, JSON objects are kept whole but for managedFields.
   */
  protobuf?: ProtobufObjectType;
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

/** The watch was cut (not refused by a server that is down, not an HTTP error answer). */
function streamBroke(err: unknown): boolean {
  return !(err instanceof KubeApiError) && (err as NodeJS.ErrnoException).code !== 'ECONNREFUSED';
}

function isGone(err: unknown): boolean {
  return err instanceof KubeApiError && err.code === 410;
}

/** The annotation of the bookmark that ends a watch's initial events (streaming list, KEP-3157). */
const INITIAL_EVENTS_END = 'k8s.io/initial-events-end';

/**
 * A server that does not stream initial events: one with the WatchList feature off refuses
 * `sendInitialEvents` as invalid (422); 400 is what a proxy or an older validator answers.
 */
function refusesInitialEvents(err: unknown): boolean {
  return err instanceof KubeApiError && (err.code === 422 || err.code === 400);
}

/**
 * Syncs, then watches from the sync's resourceVersion, as client-go's reflector with the
 * WatchListClient feature (upstream's agent): the sync is a watch that streams the current objects
 * as ADDED events and ends them with a bookmark annotated `k8s.io/initial-events-end`, served from
 * the API server's watch cache, with no LIST. A server that refuses that is listed page by page
 * instead, from then on. Either way the synced set is diffed against the store, so after a re-sync an
 * object deleted meanwhile produces a delete and an unchanged one produces nothing. A watch the
 * server ends is resumed from the last resourceVersion seen (bookmarks included); one that broke is
 * followed by a streaming sync not older than it; `410 Gone` (history compacted) re-syncs; any other
 * failure is retried with backoff.
 */
export function runInformer<T extends Meta>(client: KubeClient, options: InformerOptions<T>): Informer {
  const { store, logger, what, protobuf } = options;
  /** An object from a list, as it is kept. */
  const keep = (o: T): T => (protobuf ? (projectJson(protobuf.schema, o) as T) : slim(o));
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
      for (const item of page.items ?? []) items.push(keep(item));
      resourceVersion = page.metadata?.resourceVersion ?? '';
      cont = page.metadata?.continue || undefined;
    } while (cont !== undefined && !stopped);
    replaceAll(items);
    return resourceVersion;
  }

  /** Makes the store hold exactly `items`: upserts what is new or changed, deletes what is gone. */
  function replaceAll(items: Iterable<T>): void {
    const seen = new Set<string>();
    for (const item of items) {
      seen.add(keyOf(item));
      const cached = store.get(item.metadata.namespace, item.metadata.name ?? '');
      if (cached === undefined || cached.metadata.resourceVersion !== item.metadata.resourceVersion) store.upsert(item);
    }
    for (const cached of store.list()) if (!seen.has(keyOf(cached))) store.delete(cached);
  }

  function apply(event: WatchEvent): string | undefined {
    const object = event.object as unknown as T;
    if (event.type === 'ADDED' || event.type === 'MODIFIED') store.upsert(protobuf ? object : slim(object));
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

  /** Set once the server refused to stream initial events: later syncs list. */
  let streamingRefused = false;
  /** A broken stream's last resourceVersion: the next streaming sync asks for a state not older than it. */
  let resyncFrom: string | undefined;

  async function loop(): Promise<void> {
    const backoff = new Backoff({ initialMs: initialDelay, maxMs: MAX_RETRY_DELAY_MS });
    let resourceVersion: string | undefined;
    const synchronised = () => {
      markSynced();
      backoff.reset();
    };
    while (!stopped) {
      try {
        const streamed = resourceVersion === undefined && !streamingRefused;
        if (resourceVersion === undefined && streamingRefused) {
          resourceVersion = await list();
          synchronised();
        }
        if (stopped) break;
        // The server ends the watch after timeoutSeconds (5–10 min, spread like client-go's).
        const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
        const query = streamed
          ? { ...selectors, sendInitialEvents: 'true', resourceVersionMatch: 'NotOlderThan', resourceVersion: resyncFrom }
          : { ...selectors, resourceVersion };
        /** The objects of the initial events, until the bookmark that ends them. */
        let initial: Map<string, T> | undefined = streamed ? new Map() : undefined;
        const stream = client.watch(
          options.path,
          { ...query, allowWatchBookmarks: 'true', timeoutSeconds: String(timeoutSeconds) },
          (event) => {
            if (initial === undefined) {
              resourceVersion = apply(event) ?? resourceVersion;
              return;
            }
            const object = event.object as unknown as T;
            if (event.type === 'BOOKMARK') {
              if (object.metadata?.annotations?.[INITIAL_EVENTS_END] !== 'true') return;
              replaceAll(initial.values());
              initial = undefined;
              resourceVersion = object.metadata.resourceVersion || undefined;
              resyncFrom = undefined;
              synchronised();
            } else if (event.type === 'DELETED') initial.delete(keyOf(object));
            else initial.set(keyOf(object), protobuf ? object : slim(object));
          },
          (timeoutSeconds + 30) * 1000,
          protobuf ? { protobuf } : {},
        );
        current = stream;
        const started = monotonicNow();
        await stream.done;
        if (initial !== undefined && !stopped) {
          // Ended by its timeout with no end marker: a server that ignores the parameter.
          streamingRefused = true;
          logger.info(`the API server did not end the initial ${what} events; listing instead`);
          continue;
        }
        if (monotonicNow() - started < 1000) {
          // A server that ends every watch at once must not turn this loop into a busy one.
          await sleep(backoff.next());
        } else {
          backoff.reset();
        }
      } catch (err) {
        if (stopped) break;
        if (resourceVersion === undefined && !streamingRefused && refusesInitialEvents(err)) {
          streamingRefused = true;
          logger.info(`the API server does not stream initial ${what} events; listing instead`, { error: errorMessage(err) });
          continue;
        }
        if (isGone(err)) {
          logger.info(`${what} watch history expired; re-syncing`);
          resourceVersion = undefined;
          resyncFrom = undefined;
          continue;
        }
        if (resourceVersion !== undefined && !streamingRefused && streamBroke(err)) {
          // As client-go's reflector: a stream that broke (the API server gone, a connection cut)
          // is followed by a streaming sync, one request, rather than a resume that a restarted
          // API server answers 410 and a sync after it.
          resyncFrom = resourceVersion;
          resourceVersion = undefined;
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
