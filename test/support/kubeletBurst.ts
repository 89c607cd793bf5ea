import assert from 'node:assert/strict';
import { ErrorCode } from '@istio-cni/cni';
import type { ExecResult } from './execPlugin.ts';
import type { FaultCounts, FaultProxy } from './faultProxy.ts';

export const TRY_AGAIN: number = ErrorCode.TryAgainLater;
/** How many times a burst retries an ADD answered 11, as kubelet would on its next sync. */
export const KUBELET_RETRIES = 10;

/** The CNI error code on stdout of a failed ADD (0 for success, -1 for no CNI error document). */
export function cniCode(res: ExecResult): number {
  if (res.code === 0) return 0;
  try {
    return (JSON.parse(res.stdout) as { code?: number }).code ?? -1;
  } catch {
    return -1;
  }
}

export interface BurstOptions {
  proxy: FaultProxy;
  /** The pods' names, in the order `register` and `add` take their indexes. */
  names: readonly string[];
  /** Puts pod `i` in the API, just before its ADD starts. */
  register(i: number): void;
  add(i: number): Promise<ExecResult>;
  /** What a pod is once its ADD succeeded, for the assertion message ("captured", "enrolled"). */
  outcome: string;
  /** Runs alongside the ADDs (e.g. an API server restart). */
  during?: (() => Promise<void>) | undefined;
}

/**
 * ADDs every pod at once, each registered in the API as its ADD starts while watch events are held
 * back (so the daemon has not seen them and reads each one directly), runs `during` alongside, and
 * asserts every first answer is 0 or 11; then retries the 11s like kubelet does until each is 0.
 */
export async function burstWithKubeletRetries(o: BurstOptions): Promise<{ first: number[]; retried: number }> {
  o.proxy.holdWatches(true);
  let results: ExecResult[];
  try {
    [results] = await Promise.all([
      Promise.all(
        o.names.map((_, i) => {
          o.register(i);
          return o.add(i);
        }),
      ),
      o.during?.(),
    ]);
  } finally {
    o.proxy.holdWatches(false);
  }
  const first = results.map(cniCode);
  const bad = results.flatMap((r, i) =>
    first[i] === 0 || first[i] === TRY_AGAIN ? [] : [`${o.names[i]}: exit ${r.code} ${r.stdout} ${r.stderr.slice(-400)}`],
  );
  assert.deepEqual(bad, [], 'every ADD ends 0 or 11');
  let retried = 0;
  for (const [i, name] of o.names.entries()) {
    let code = first[i];
    let last = results[i]!;
    for (let n = 0; code === TRY_AGAIN && n < KUBELET_RETRIES; n++) {
      retried++;
      await new Promise((r) => setTimeout(r, 200));
      last = await o.add(i);
      code = cniCode(last);
      assert.ok(code === 0 || code === TRY_AGAIN, `retry of ${name}: ${last.stdout}`);
    }
    // The last answer's message says which step kept refusing (ztunnel, probe set, annotation, start-up).
    assert.equal(code, 0, `${name} ${o.outcome} after kubelet-style retries; last answer: ${last.stdout.trim()}`);
  }
  return { first, retried };
}

export const faultsOn = (c: FaultCounts, method: string): number => c.faultsByMethod[method] ?? 0;

/** One line: the burst's first answers and retries, and the faults the proxy injected since `before`. */
export function burstDiagnostic(
  before: FaultCounts,
  after: FaultCounts,
  burst: { first: number[]; retried: number },
  methods: readonly string[],
): string {
  const delta = (k: 'reset' | 'resetAfterForward' | 'tooMany' | 'unavailable' | 'closedOnReuse' | 'restarts') => after[k] - before[k];
  const byMethod = (m: string) =>
    `${m} ${faultsOn(after, m) - faultsOn(before, m)}/${(after.byMethod[m] ?? 0) - (before.byMethod[m] ?? 0)}`;
  const { first, retried } = burst;
  return (
    `first answers: ${first.filter((x) => x === 0).length} ok, ${first.filter((x) => x === TRY_AGAIN).length} try-again; ${retried} retries; ` +
    `faults: ${delta('reset')} reset, ${delta('resetAfterForward')} reset after forward, ${delta('tooMany')} 429, ${delta('unavailable')} 503, ` +
    `${delta('closedOnReuse')} closed on reuse, ${delta('restarts')} restarts; faulted/requests ${methods.map(byMethod).join(', ')}`
  );
}
