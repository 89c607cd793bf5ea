import { errorMessage } from '@istio-cni/cni';
import type { Drift } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import { monotonicNow } from '@istio-cni/kube';

/** One pod the agent manages, or one piece of the node's own state, as the verification loop sees it. */
export interface VerificationTarget {
  /** Stable key (the attachment: `containerId/ifName`). */
  key: string;
  /** `namespace/name`; for `scope: 'node'`, what the state is (`host probe rules`). */
  pod: string;
  /** `node`: state of the node itself, not of a pod (logged as `state`, not `pod`). */
  scope?: 'node';
}

/** What a pod's check found. */
export type VerifyOutcome =
  | { status: 'ok' }
  /** A legitimate change is under way (deletion, decision changed, netns gone): the normal paths own it. */
  | { status: 'skipped'; reason: string }
  /** The pod could not be inspected (netns unreadable, a command failed): reported, never repaired. */
  | { status: 'unverifiable'; error: string }
  /** `repair` absent: the drift is only reported (e.g. rules we did not write in a pod outside the mesh). */
  | {
      status: 'drift';
      drift: Drift[];
      repair?: () => Promise<void>;
      /** `false`: the repair cannot be confirmed by checking again at once (an API write the watch has not delivered yet). */
      confirm?: boolean;
    };

export type DriftAction = 'repaired' | 'failed' | 'reported';

/** The last verification of one pod (kept for `doctor` and tests). */
export interface PodVerification {
  pod: string;
  /** Milliseconds since the epoch (the wall clock; the schedule runs on the monotonic `VerificationClock`). */
  at: number;
  status: VerifyOutcome['status'];
  drift: Drift[];
  action?: DriftAction;
  /** Why it was skipped, could not be verified, or the repair failed. */
  error?: string;
}

export interface VerificationClock {
  now(): number;
  /** Resolves after `ms` or when `signal` aborts (never rejects). */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export interface DriftCounter {
  inc(labels: { kind: string; action: DriftAction }): void;
}

export interface VerificationLoopOptions {
  /** A full pass over every pod takes this long (VERIFY_INTERVAL); `0` turns periodic passes off. */
  intervalMs: number;
  /** VERIFY_REPORT_ONLY: log and count drift, change nothing. */
  reportOnly: boolean;
  targets(): VerificationTarget[];
  /** Runs before each pass and each `verifyNow` (e.g. takes pods no ADD reached into the targets); a failure is logged, the pass goes on. */
  prepare?: () => Promise<unknown>;
  verify(target: VerificationTarget): Promise<VerifyOutcome>;
  logger: Logger;
  drift: DriftCounter;
  /** Counts every check by its first outcome (`ok`, `drift`, `skipped`, `unverifiable`). */
  verified?: { inc(labels: { result: VerifyOutcome['status'] }): void };
  clock?: VerificationClock;
  /** Uniform in [0, 1); jitter source. */
  random?: () => number;
}

export interface VerificationLoop {
  /** Starts periodic passes (no-op with interval 0). */
  start(): void;
  stop(): Promise<void>;
  /** Verifies now, outside the schedule: every target, or those `select` keeps. */
  verifyNow(select?: (t: VerificationTarget) => boolean): Promise<PodVerification[]>;
  /** Checks now without acting: no repair, no log line, no metric, results untouched (`doctor`). */
  inspectNow(select?: (t: VerificationTarget) => boolean): Promise<{ target: VerificationTarget; outcome: VerifyOutcome }[]>;
  /** Last verification per target key. */
  results(): ReadonlyMap<string, PodVerification>;
}

function sameDrift(a: readonly Drift[], b: readonly Drift[]): boolean {
  return a.length === b.length && a.every((d, i) => d.kind === b[i]?.kind && d.detail === b[i]?.detail);
}

export const systemClock: VerificationClock = {
  now: monotonicNow,
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const timer = setTimeout(done, ms);
      timer.unref();
      function done() {
        signal.removeEventListener('abort', done);
        clearTimeout(timer);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    }),
};

/**
 * Continuous verification: each pass spreads the pods over the interval (pod i of n at a random
 * point of slot i, so a node's pods never all hit nsenter at once and two agents' passes do not
 * line up), and the first pass starts at a random point of the first interval. A pod is checked
 * by `verify`; drift is repaired unless report-only, then checked again: still drifting = failed.
 * Drift that is only reported is logged and counted once while it stays the same.
 */
export function createVerificationLoop(options: VerificationLoopOptions): VerificationLoop {
  const clock = options.clock ?? systemClock;
  const random = options.random ?? Math.random;
  const results = new Map<string, PodVerification>();
  const inFlight = new Map<string, Promise<PodVerification>>();
  const abort = new AbortController();
  let running: Promise<void> | undefined;

  function count(drift: readonly Drift[], action: DriftAction): void {
    for (const kind of new Set(drift.map((d) => d.kind))) options.drift.inc({ kind, action });
  }

  async function check(target: VerificationTarget): Promise<VerifyOutcome> {
    try {
      return await options.verify(target);
    } catch (err) {
      return { status: 'unverifiable', error: errorMessage(err) };
    }
  }

  async function verifyOne(target: VerificationTarget): Promise<PodVerification> {
    const node = target.scope === 'node';
    const log = options.logger.with(node ? { state: target.pod } : { pod: target.pod });
    const subject = node ? 'node state' : 'pod';
    const first = await check(target);
    const record: PodVerification = { pod: target.pod, at: Date.now(), status: first.status, drift: [] };
    options.verified?.inc({ result: first.status });
    if (first.status === 'skipped' || first.status === 'unverifiable') {
      if (first.status === 'skipped') record.error = first.reason;
      else {
        record.error = first.error;
        options.drift.inc({ kind: 'unverifiable', action: 'reported' });
        log.warn(`${subject} could not be verified`, { error: first.error });
      }
      return record;
    }
    if (first.status === 'ok') return record;
    record.drift = first.drift;
    const differed = first.drift.map((d) => ({ kind: d.kind, detail: d.detail }));
    if (options.reportOnly || first.repair === undefined) {
      record.action = 'reported';
      // A drift left in place is logged and counted when first seen, not on every pass.
      const before = results.get(target.key);
      if (before?.action === 'reported' && sameDrift(before.drift, first.drift)) return record;
      count(first.drift, 'reported');
      log.warn(`${subject} drifted from its plan`, { drift: differed, action: 'reported', reportOnly: options.reportOnly });
      return record;
    }
    let error: string | undefined;
    try {
      await first.repair();
      const after: VerifyOutcome = first.confirm === false ? { status: 'ok' } : await check(target);
      if (after.status === 'drift') error = `still differs after repair: ${after.drift.map((d) => d.detail).join('; ')}`;
      else if (after.status === 'unverifiable') error = `could not be verified after repair: ${after.error}`;
    } catch (err) {
      error = errorMessage(err);
    }
    record.action = error === undefined ? 'repaired' : 'failed';
    count(first.drift, record.action);
    if (error === undefined) log.warn(`${subject} drifted from its plan`, { drift: differed, action: 'repaired' });
    else {
      record.error = error;
      log.error(`${subject} drifted from its plan`, { drift: differed, action: 'failed', error });
    }
    return record;
  }

  /** One verification per pod at a time: a request for a pod being verified waits for that result. */
  function verifyDeduplicated(target: VerificationTarget): Promise<PodVerification> {
    const pending = inFlight.get(target.key);
    if (pending !== undefined) return pending;
    const p = verifyOne(target)
      .then((r) => {
        results.set(target.key, r);
        return r;
      })
      .finally(() => inFlight.delete(target.key));
    inFlight.set(target.key, p);
    return p;
  }

  function forget(targets: readonly VerificationTarget[]): void {
    const live = new Set(targets.map((t) => t.key));
    for (const key of results.keys()) if (!live.has(key)) results.delete(key);
  }

  async function prepare(): Promise<void> {
    try {
      await options.prepare?.();
    } catch (err) {
      options.logger.error('preparing the verification pass failed', { error: errorMessage(err) });
    }
  }

  async function pass(): Promise<void> {
    const start = clock.now();
    await prepare();
    const targets = options.targets();
    forget(targets);
    const slot = options.intervalMs / Math.max(targets.length, 1);
    for (const [i, target] of targets.entries()) {
      const wait = start + (i + random()) * slot - clock.now();
      if (wait > 0) await clock.sleep(wait, abort.signal);
      if (abort.signal.aborted) return;
      await verifyDeduplicated(target);
    }
    const rest = start + options.intervalMs - clock.now();
    if (rest > 0) await clock.sleep(rest, abort.signal);
  }

  async function run(): Promise<void> {
    await clock.sleep(random() * options.intervalMs, abort.signal);
    while (!abort.signal.aborted) {
      try {
        await pass();
      } catch (err) {
        options.logger.error('verification pass failed', { error: errorMessage(err) });
        await clock.sleep(options.intervalMs, abort.signal);
      }
    }
  }

  return {
    start() {
      if (options.intervalMs > 0 && running === undefined) running = run();
    },
    async stop() {
      abort.abort();
      await running;
      await Promise.allSettled([...inFlight.values()]);
    },
    async verifyNow(select) {
      await prepare();
      const targets = options.targets();
      if (select === undefined) forget(targets);
      const out: PodVerification[] = [];
      for (const t of targets) if (select === undefined || select(t)) out.push(await verifyDeduplicated(t));
      return out;
    },
    async inspectNow(select) {
      const out: { target: VerificationTarget; outcome: VerifyOutcome }[] = [];
      for (const target of options.targets())
        if (select === undefined || select(target)) out.push({ target, outcome: await check(target) });
      return out;
    },
    results: () => results,
  };
}
