import { setTimeout as sleepFor } from 'node:timers/promises';

/**
 * Bounded, jittered exponential backoff: the one retry timing shared by the Kubernetes client, the
 * informers, the taint remover, the plugin's degraded mode and the daemon's start-up steps. The
 * timing is pure (`random`, `now` and `sleep` are injectable), so tests run without waiting.
 */
export interface BackoffPolicy {
  /** Delay before the first retry. */
  initialMs: number;
  /** Ceiling of a single delay. */
  maxMs: number;
  /** Growth per retry; 2 unless told. */
  factor?: number;
  /** Fraction of each delay drawn at random (0 = none, 0.2 = ±10 %… up to the delay ×1.2); 0.2 unless told. */
  jitter?: number;
}

/** The delay before retry number `retry` (1-based), jittered upwards like client-go's `wait.Jitter`. */
export function backoffDelay(policy: BackoffPolicy, retry: number, random: () => number = Math.random): number {
  const factor = policy.factor ?? 2;
  const jitter = policy.jitter ?? 0.2;
  const base = Math.min(policy.maxMs, policy.initialMs * factor ** Math.max(0, retry - 1));
  return Math.round(Math.min(policy.maxMs, base * (1 + jitter * random())));
}

/** A delay sequence for long-running loops (watches, removers): `next()` grows, `reset()` after a success. */
export class Backoff {
  readonly #policy: BackoffPolicy;
  readonly #random: () => number;
  #retry = 0;

  constructor(policy: BackoffPolicy, random: () => number = Math.random) {
    this.#policy = policy;
    this.#random = random;
  }

  next(): number {
    this.#retry++;
    return backoffDelay(this.#policy, this.#retry, this.#random);
  }

  reset(): void {
    this.#retry = 0;
  }
}

export interface RetryDecision {
  /** Retry this failure? */
  retry: boolean;
  /** The server's own wait (`Retry-After`), used instead of the backoff when longer. */
  afterMs?: number;
  /** Retry without waiting (a stale pooled connection: a new one will do). */
  immediately?: boolean;
}

export interface RetryOptions {
  policy: BackoffPolicy;
  /** Attempts in all, the first included. */
  maxAttempts: number;
  /** Stop retrying when the next attempt could not start before this much time has passed. */
  deadlineMs?: number;
  classify(err: unknown, attempt: number): RetryDecision;
  /** Called before each wait (logs, metrics). */
  onRetry?(err: unknown, attempt: number, delayMs: number): void;
  sleep?(ms: number): Promise<void>;
  now?(): number;
  random?(): number;
}

/**
 * The clock for every duration, deadline and schedule: monotonic, unlike `Date.now()`, which a
 * stepped wall clock moves back or forward (holding a schedule back, bursting a rate limiter).
 */
export const monotonicNow = (): number => performance.now();

/** Runs `fn` until it succeeds, `classify` says stop, the attempts run out or the deadline would pass. */
export async function retryWithBackoff<T>(fn: (attempt: number) => Promise<T>, o: RetryOptions): Promise<T> {
  const now = o.now ?? monotonicNow;
  const sleep = o.sleep ?? ((ms: number) => sleepFor(ms));
  const started = now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      const decision = o.classify(err, attempt);
      if (!decision.retry || attempt >= o.maxAttempts) throw err;
      const delay = decision.immediately ? 0 : Math.max(backoffDelay(o.policy, attempt, o.random), decision.afterMs ?? 0);
      if (o.deadlineMs !== undefined && now() - started + delay >= o.deadlineMs) throw err;
      o.onRetry?.(err, attempt, delay);
      if (delay > 0) await sleep(delay);
    }
  }
}
