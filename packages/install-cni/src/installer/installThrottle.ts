import { monotonicNow } from '@istio-cni/kube';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ThrottleOptions {
  /** Token refill rate; upstream 0.2/s (one pass per 5 s counts as calm). */
  ratePerSecond: number;
  burst: number;
  /** Longest single sleep; upstream 1 s. */
  maxDelayMs: number;
  /** Warn about a conflicting writer after more than this many consecutive hits; upstream 5. */
  warnAfterHits: number;
}

export const DEFAULT_THROTTLE: ThrottleOptions = { ratePerSecond: 0.2, burst: 1, maxDelayMs: 1000, warnAfterHits: 5 };

/**
 * Re-install throttle (upstream `cni/pkg/install/install.go`): a token bucket used to notice a loop rather than to strictly
 * limit. Each pass takes a token; without one it sleeps `min(delay, maxDelayMs)` and counts a hit.
 * Consecutive hits mean another component keeps reverting our work.
 */
export class InstallThrottle {
  readonly #o: ThrottleOptions;
  readonly #now: () => number;
  #tokens: number;
  #last: number;
  #hits = 0;

  constructor(o: Partial<ThrottleOptions> = {}, now: () => number = monotonicNow) {
    this.#o = { ...DEFAULT_THROTTLE, ...o };
    this.#now = now;
    this.#tokens = this.#o.burst;
    this.#last = now();
  }

  get hits(): number {
    return this.#hits;
  }

  /** Takes a token; returns the delay to sleep (0 when calm) and whether to warn. */
  reserve(): { delayMs: number; warn: boolean } {
    const now = this.#now();
    const elapsed = Math.max(0, now - this.#last) / 1000;
    this.#last = now;
    this.#tokens = Math.min(this.#o.burst, this.#tokens + elapsed * this.#o.ratePerSecond) - 1;
    if (this.#tokens >= 0) {
      this.#hits = 0;
      return { delayMs: 0, warn: false };
    }
    const delayMs = Math.min((-this.#tokens / this.#o.ratePerSecond) * 1000, this.#o.maxDelayMs);
    this.#hits++;
    return { delayMs, warn: this.#hits > this.#o.warnAfterHits };
  }

  /** Sleeps as {@link reserve} says; resolves early when `signal` aborts. */
  async throttle(signal?: AbortSignal): Promise<{ warn: boolean }> {
    const { delayMs, warn } = this.reserve();
    if (delayMs > 0) await sleep(delayMs, undefined, signal ? { signal } : {}).catch(() => undefined);
    return { warn };
  }
}
