/** Thrown when the waiting line is full: the caller answers "try again later" instead of queueing. */
export class LimiterFullError extends Error {
  override name = 'LimiterFullError';
}

export interface ConcurrencyLimiter {
  run<T>(task: () => Promise<T>): Promise<T>;
  readonly active: number;
  readonly queued: number;
}

/**
 * Runs at most `concurrency` tasks at once and lets at most `maxQueued` wait, so a burst of pod
 * creations costs bounded memory and never starves the machine (docs/architecture.md "Hand-off protocol").
 */
export function createConcurrencyLimiter(concurrency: number, maxQueued: number): ConcurrencyLimiter {
  let active = 0;
  const waiting: (() => void)[] = [];
  const release = () => {
    active--;
    const next = waiting.shift();
    if (next) {
      active++;
      next();
    }
  };
  return {
    get active() {
      return active;
    },
    get queued() {
      return waiting.length;
    },
    async run<T>(task: () => Promise<T>): Promise<T> {
      if (active >= concurrency) {
        if (waiting.length >= maxQueued) throw new LimiterFullError(`${waiting.length} requests already waiting`);
        await new Promise<void>((resolve) => waiting.push(resolve));
      } else {
        active++;
      }
      try {
        return await task();
      } finally {
        release();
      }
    },
  };
}
