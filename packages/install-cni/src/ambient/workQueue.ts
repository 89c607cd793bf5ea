/**
 * A keyed work queue with per-key exponential backoff and an overall token bucket, like client-go's
 * default controller rate limiter (upstream `informers.go`: 5 ms → 5 s per item, 10/s with burst 100). A key
 * queued again while waiting is processed once; a key being processed is re-queued after it.
 * Attempts are unlimited: ztunnel may connect at any time.
 */
export interface WorkQueueOptions<T> {
  process(item: T): Promise<'done' | 'retry'>;
  keyOf(item: T): string;
  baseDelayMs?: number;
  maxDelayMs?: number;
  ratePerSecond?: number;
  burst?: number;
  onError?(item: T, err: unknown): void;
  now?: () => number;
}

export interface WorkQueue<T> {
  add(item: T): void;
  /** Resolves when nothing is queued, waiting or running (tests and shutdown). */
  drained(): Promise<void>;
  stop(): void;
  readonly length: number;
}

export function createWorkQueue<T>(o: WorkQueueOptions<T>): WorkQueue<T> {
  const base = o.baseDelayMs ?? 5;
  const max = o.maxDelayMs ?? 5_000;
  const rate = o.ratePerSecond ?? 10;
  const burst = o.burst ?? 100;
  const now = o.now ?? (() => Date.now());
  const pending = new Map<string, T>();
  const order: string[] = [];
  const failures = new Map<string, number>();
  const timers = new Map<string, NodeJS.Timeout>();
  const running = new Set<string>();
  const again = new Map<string, T>();
  let tokens = burst;
  let refilledAt = now();
  let stopped = false;
  let pump: NodeJS.Timeout | undefined;
  let idleWaiters: (() => void)[] = [];

  const idle = () => pending.size === 0 && timers.size === 0 && running.size === 0 && again.size === 0;
  const notifyIdle = () => {
    if (!idle()) return;
    const w = idleWaiters;
    idleWaiters = [];
    for (const r of w) r();
  };

  function takeToken(): number {
    const t = now();
    tokens = Math.min(burst, tokens + ((t - refilledAt) / 1000) * rate);
    refilledAt = t;
    if (tokens >= 1) {
      tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - tokens) / rate) * 1000);
  }

  function schedule(): void {
    if (stopped || pump !== undefined) return;
    pump = setTimeout(run, 0);
  }

  function run(): void {
    pump = undefined;
    while (!stopped && order.length > 0) {
      const wait = takeToken();
      if (wait > 0) {
        pump = setTimeout(run, wait);
        return;
      }
      const key = order.shift() as string;
      const item = pending.get(key) as T;
      pending.delete(key);
      void work(key, item);
    }
  }

  async function work(key: string, item: T): Promise<void> {
    running.add(key);
    let outcome: 'done' | 'retry';
    try {
      outcome = await o.process(item);
    } catch (err) {
      o.onError?.(item, err);
      outcome = 'retry';
    }
    running.delete(key);
    const queuedMeanwhile = again.get(key);
    again.delete(key);
    if (outcome === 'retry' && queuedMeanwhile === undefined) {
      const n = (failures.get(key) ?? 0) + 1;
      failures.set(key, n);
      const delay = Math.min(max, base * 2 ** (n - 1));
      timers.set(
        key,
        setTimeout(() => {
          timers.delete(key);
          enqueue(key, item);
        }, delay),
      );
    } else {
      failures.delete(key);
      if (queuedMeanwhile !== undefined) enqueue(key, queuedMeanwhile);
    }
    notifyIdle();
  }

  function enqueue(key: string, item: T): void {
    if (stopped) return;
    if (running.has(key)) {
      again.set(key, item);
      return;
    }
    const timer = timers.get(key);
    if (timer !== undefined) {
      // A fresh event supersedes the backoff wait for the same key.
      clearTimeout(timer);
      timers.delete(key);
    }
    if (!pending.has(key)) order.push(key);
    pending.set(key, item);
    schedule();
  }

  return {
    add: (item) => enqueue(o.keyOf(item), item),
    get length() {
      return pending.size + timers.size + running.size;
    },
    drained: () => (idle() ? Promise.resolve() : new Promise<void>((r) => idleWaiters.push(r))),
    stop() {
      stopped = true;
      clearTimeout(pump);
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
      pending.clear();
      order.length = 0;
      notifyIdle();
    },
  };
}
