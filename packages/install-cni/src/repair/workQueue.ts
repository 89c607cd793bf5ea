export type DropReason = 'queue full' | 'too many attempts';

export interface WorkQueueOptions {
  /** Handles one key; a rejection schedules a retry. */
  process(key: string): Promise<void>;
  /** Attempts per key before it is dropped (upstream: 5). */
  maxAttempts?: number;
  /** Keys waiting at once; more are dropped (each pod on the node is at most one key). */
  maxQueued?: number;
  /** First retry delay, doubled per failed attempt up to `maxRetryDelayMs`. */
  retryDelayMs?: number;
  maxRetryDelayMs?: number;
  onDrop?(key: string, reason: DropReason, error?: unknown): void;
}

export interface WorkQueue {
  /** Queues `key` unless it is already waiting; false when dropped because the queue is full. */
  add(key: string): boolean;
  /** Resolves once nothing is queued, running or waiting for a retry. */
  idle(): Promise<void>;
  /** Drops everything queued and cancels retries; a running `process` finishes. */
  stop(): void;
}

/**
 * A keyed work queue with one worker, like client-go's: a key is never processed twice at once,
 * a key added while it is being processed runs again afterwards (with the newest state), and a
 * failure is retried with exponential backoff until `maxAttempts`.
 */
export function createWorkQueue(options: WorkQueueOptions): WorkQueue {
  const maxAttempts = options.maxAttempts ?? 5;
  const maxQueued = options.maxQueued ?? 10_000;
  const baseDelay = options.retryDelayMs ?? 1000;
  const maxDelay = options.maxRetryDelayMs ?? 60_000;
  const queue: string[] = [];
  const queued = new Set<string>();
  const attempts = new Map<string, number>();
  const retryTimers = new Map<string, NodeJS.Timeout>();
  let processing: string | undefined;
  let running = false;
  let stopped = false;
  let idleWaiters: (() => void)[] = [];

  const isIdle = () => queue.length === 0 && processing === undefined && retryTimers.size === 0;
  const notifyIdle = () => {
    if (!isIdle()) return;
    const waiters = idleWaiters;
    idleWaiters = [];
    for (const w of waiters) w();
  };

  async function drain(): Promise<void> {
    if (running) return;
    running = true;
    while (!stopped && queue.length > 0) {
      const key = queue.shift() as string;
      queued.delete(key);
      processing = key;
      try {
        await options.process(key);
        attempts.delete(key);
      } catch (err) {
        const n = (attempts.get(key) ?? 0) + 1;
        if (n >= maxAttempts) {
          attempts.delete(key);
          options.onDrop?.(key, 'too many attempts', err);
        } else if (!stopped) {
          attempts.set(key, n);
          const delay = Math.min(baseDelay * 2 ** (n - 1), maxDelay);
          clearTimeout(retryTimers.get(key));
          const timer = setTimeout(() => {
            retryTimers.delete(key);
            add(key);
            notifyIdle();
          }, delay);
          timer.unref();
          retryTimers.set(key, timer);
        }
      }
      processing = undefined;
    }
    running = false;
    notifyIdle();
  }

  function add(key: string): boolean {
    if (stopped) return false;
    if (queued.has(key)) return true;
    if (queue.length >= maxQueued) {
      options.onDrop?.(key, 'queue full');
      return false;
    }
    queue.push(key);
    queued.add(key);
    void drain();
    return true;
  }

  return {
    add,
    idle: () =>
      new Promise<void>((resolve) => {
        idleWaiters.push(resolve);
        notifyIdle();
      }),
    stop() {
      stopped = true;
      queue.length = 0;
      queued.clear();
      for (const t of retryTimers.values()) clearTimeout(t);
      retryTimers.clear();
      notifyIdle();
    },
  };
}
