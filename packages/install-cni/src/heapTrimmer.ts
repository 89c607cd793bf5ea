import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { errorMessage } from '@istio-cni/cni';
import type { Logger } from '@istio-cni/handoff';

/** What the trimmer reads and does; the daemon's are V8's (`v8Heap()`), tests pass their own. */
export interface HeapAccess {
  /** Bytes of heap V8 holds from the system (committed), garbage not yet collected included. */
  committedBytes(): number;
  /** One memory-reducing full collection, synchronous: garbage freed and emptied pages handed back. */
  collect(): void;
}

export interface HeapTrimmerOptions {
  /** How often the heap is looked at (HEAP_TRIM_INTERVAL); `0`: never (V8's own memory reducer only). */
  intervalMs: number;
  heap: HeapAccess;
  logger: Logger;
}

export interface HeapTrimmer {
  /** One look at the heap: collects when it grew by the threshold since the start or the last collection (true then). */
  check(): boolean;
  stop(): void;
}

/** Growth over the level at the start or after the last collection that makes a check collect. */
const THRESHOLD_BYTES = 1024 * 1024;

const mib = (bytes: number) => Math.round((bytes / 1048576) * 100) / 100;

/**
 * Hands back to the system heap the daemon grew and no longer uses. V8 does it itself (its memory
 * reducer) only for a process that looks idle, and once per 10 MiB of growth: a node agent verifying
 * one pod every few hundred milliseconds, or watching a node with pods coming and going, never looks
 * idle, so the heap its busiest moment grew (enrolling pods, the first verification pass reading
 * every pod) stayed committed: 3.9 MiB above an idle agent with 110 ambient pods
 * (docs/architecture.md, "Heap trims"). Once per interval the committed heap is compared
 * with its level at the start or after the last collection; grown by the threshold, one
 * memory-reducing collection runs. A heap that does not grow costs one `getHeapStatistics()` per interval.
 */
export function startHeapTrimmer(options: HeapTrimmerOptions): HeapTrimmer {
  let baseline = options.heap.committedBytes();
  let failed = false;
  let timer: NodeJS.Timeout | undefined;
  const check = (): boolean => {
    if (failed) return false;
    const before = options.heap.committedBytes();
    // V8 handing memory back by itself lowers the mark too: growth counts from the lowest level seen.
    if (before < baseline) baseline = before;
    if (before - baseline < THRESHOLD_BYTES) return false;
    const start = performance.now();
    try {
      options.heap.collect();
    } catch (err) {
      // Memory is kept, never the daemon lost: V8's own memory reducer goes on.
      failed = true;
      clearInterval(timer);
      options.logger.warn('heap trim failed; no more trims until restart', { error: errorMessage(err) });
      return false;
    }
    const after = options.heap.committedBytes();
    baseline = after;
    options.logger.info('heap trimmed', {
      committedMiB: mib(before),
      afterMiB: mib(after),
      ms: Math.round((performance.now() - start) * 10) / 10,
    });
    return true;
  };
  if (options.intervalMs > 0) timer = setInterval(check, options.intervalMs);
  timer?.unref();
  return {
    check,
    stop: () => clearInterval(timer),
  };
}

type Gc = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/**
 * V8's heap: committed bytes from `getHeapStatistics()`; the collection through the `gc` function a
 * context created after `--expose-gc` carries (the daemon's own global never gets one), flavor
 * `last-resort`, V8's memory-reducing full collection (the one behind its low-memory notification);
 * then `afterCollect` (the daemon's: glibc's `malloc_trim`, when koffi is loaded anyway).
 */
export function v8Heap(afterCollect?: () => void): HeapAccess {
  let gc: Gc | undefined;
  return {
    committedBytes: () => getHeapStatistics().total_heap_size,
    collect() {
      if (gc === undefined) {
        setFlagsFromString('--expose-gc');
        gc = runInNewContext('gc') as Gc;
      }
      gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
      afterCollect?.();
    },
  };
}
