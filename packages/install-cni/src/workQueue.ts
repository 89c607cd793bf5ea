import { backoffDelay, monotonicNow } from '@istio-cni/kube';

export type DropReason = 'queue full' | 'too many attempts';

export interface WorkQueueOptions<T> {
  keyOf(item: T): string;
  /** Handles one item; a rejection schedules a retry of that key. */
  process(item: T): Promise<void>;
  /** First retry delay, doubled per failed attempt up to `maxRetryDelayMs`. */
  retryDelayMs: number;
  maxRetryDelayMs: number;
  /** Attempts per key before it is dropped; unlimited by default. */
  maxAttempts?: number;
  /** Keys waiting at once; more are dropped. Unlimited by default. */
  maxQueued?: number;
  /** Keys processed at once; unlimited by default. */
  concurrency?: number;
  /** A token bucket over all starts (client-go's overall limiter); none by default. */
  rate?: { perSecond: number; burst: number };
  /** Every rejection of `process`, before the retry or the drop. */
  onError?(item: T, err: unknown): void;
  onDrop?(key: string, reason: DropReason, err?: unknown): void;
  now?: () => number;
}

export interface WorkQueue<T> {
  /** Queues `item` under its key (a key already waiting keeps its place and takes the newer item); false when dropped because the queue is full. */
  add(item: T): boolean;
  /** Resolves once nothing is queued, running or waiting for a retry. */
  idle(): Promise<void>;
  /** Drops everything queued and cancels retries; a running `process` finishes. */
  stop(): void;
}

/**
 * A keyed work queue like client-go's rate-limited one: a key queued again while it waits is
 * processed once, with the newest item; a key is never processed twice at once, and one added while
 * it is processed runs again afterwards. A failure is retried with per-key exponential backoff until
 * `maxAttempts`; a fresh add of that key supersedes the backoff wait, and only a success resets the
 * count. Starts are deferred to the next turn of the event loop, so a burst of adds is deduplicated.
 */
export function createWorkQueue<T>(o: WorkQueueOptions<T>): WorkQueue<T> {
  const maxAttempts = o.maxAttempts ?? Infinity;
  const maxQueued = o.maxQueued ?? Infinity;
  const concurrency = o.concurrency ?? Infinity;
  const takeToken = o.rate === undefined ? () => 0 : tokenBucket(o.rate.perSecond, o.rate.burst, o.now ?? monotonicNow);
  /** Keys to run, in the order they were queued (a Map keeps insertion order). */
  const waiting = new Map<string, T>();
  /** Keys added while they were running: queued again once that run ends. */
  const addedWhileRunning = new Map<string, T>();
  const running = new Set<string>();
  const retryTimers = new Map<string, NodeJS.Timeout>();
  const failures = new Map<string, number>();
  let cancelPump: (() => void) | undefined;
  let stopped = false;
  let idleWaiters: (() => void)[] = [];

  const isIdle = () => waiting.size === 0 && addedWhileRunning.size === 0 && running.size === 0 && retryTimers.size === 0;
  const notifyIdle = () => {
    if (!isIdle()) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const w of waiters) w();
  };
  const full = () => waiting.size + addedWhileRunning.size >= maxQueued;

  function schedule(delayMs = 0): void {
    if (stopped || cancelPump !== undefined) return;
    if (delayMs > 0) {
      const timer = setTimeout(pump, delayMs);
      cancelPump = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(pump);
      cancelPump = () => clearImmediate(immediate);
    }
  }

  function pump(): void {
    cancelPump = undefined;
    while (!stopped && waiting.size > 0 && running.size < concurrency) {
      const wait = takeToken();
      if (wait > 0) {
        schedule(wait);
        return;
      }
      const [key, item] = waiting.entries().next().value as [string, T];
      waiting.delete(key);
      void work(key, item);
    }
  }

  async function work(key: string, item: T): Promise<void> {
    running.add(key);
    let failed = false;
    let error: unknown;
    try {
      await o.process(item);
    } catch (err) {
      failed = true;
      error = err;
      o.onError?.(item, err);
    }
    running.delete(key);
    const fresh = addedWhileRunning.get(key);
    addedWhileRunning.delete(key);
    if (!failed) {
      failures.delete(key);
    } else {
      const n = (failures.get(key) ?? 0) + 1;
      if (n >= maxAttempts) {
        failures.delete(key);
        o.onDrop?.(key, 'too many attempts', error);
      } else {
        failures.set(key, n);
        // The shared backoff formula, unjittered: each key already waits on its own timer.
        if (fresh === undefined) retryLater(key, item, backoffDelay({ initialMs: o.retryDelayMs, maxMs: o.maxRetryDelayMs, jitter: 0 }, n));
      }
    }
    if (fresh !== undefined) enqueue(key, fresh);
    schedule();
    notifyIdle();
  }

  function retryLater(key: string, item: T, delayMs: number): void {
    if (stopped) return;
    retryTimers.set(
      key,
      setTimeout(() => {
        retryTimers.delete(key);
        enqueue(key, item);
        notifyIdle();
      }, delayMs),
    );
  }

  function enqueue(key: string, item: T): boolean {
    if (stopped) return false;
    if (waiting.has(key)) {
      waiting.set(key, item);
      return true;
    }
    if (running.has(key) && addedWhileRunning.has(key)) {
      addedWhileRunning.set(key, item);
      return true;
    }
    if (full()) {
      o.onDrop?.(key, 'queue full');
      return false;
    }
    if (running.has(key)) {
      addedWhileRunning.set(key, item);
      return true;
    }
    const timer = retryTimers.get(key);
    if (timer !== undefined) {
      clearTimeout(timer);
      retryTimers.delete(key);
    }
    waiting.set(key, item);
    schedule();
    return true;
  }

  return {
    add: (item) => enqueue(o.keyOf(item), item),
    idle: () => (isIdle() ? Promise.resolve() : new Promise<void>((resolve) => idleWaiters.push(resolve))),
    stop() {
      stopped = true;
      cancelPump?.();
      cancelPump = undefined;
      for (const t of retryTimers.values()) clearTimeout(t);
      retryTimers.clear();
      waiting.clear();
      addedWhileRunning.clear();
      notifyIdle();
    },
  };
}

/** Returns 0 when a token was taken, else the milliseconds until one is available. */
function tokenBucket(perSecond: number, burst: number, now: () => number): () => number {
  let tokens = burst;
  let refilledAt = now();
  return () => {
    const t = now();
    tokens = Math.min(burst, tokens + ((t - refilledAt) / 1000) * perSecond);
    refilledAt = t;
    if (tokens >= 1) {
      tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - tokens) / perSecond) * 1000);
  };
}
