import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createWorkQueue, type WorkQueueOptions } from '../src/workQueue.ts';

const turn = () => new Promise<void>((r) => setImmediate(r));

interface Item {
  key: string;
  version: number;
}

function queueOf(process: (item: Item) => Promise<void>, options: Partial<WorkQueueOptions<Item>> = {}) {
  return createWorkQueue<Item>({ keyOf: (i) => i.key, process, retryDelayMs: 1, maxRetryDelayMs: 2, ...options });
}

describe('work queue', () => {
  it('processes a key once at a time and again when added meanwhile', async () => {
    const seen: string[] = [];
    let release: (() => void) | undefined;
    const q = createWorkQueue<string>({
      keyOf: (k) => k,
      retryDelayMs: 1,
      maxRetryDelayMs: 2,
      process: async (k) => {
        seen.push(k);
        if (seen.length === 1) await new Promise<void>((r) => (release = r));
      },
    });
    q.add('a');
    await turn();
    q.add('a'); // running: queued once more
    q.add('a'); // already queued: deduplicated
    await turn();
    release?.();
    await q.idle();
    assert.deepEqual(seen, ['a', 'a']);
  });

  it('is bounded: beyond maxQueued keys are dropped with a reason', async () => {
    const dropped: string[] = [];
    let release: (() => void) | undefined;
    const q = createWorkQueue<string>({
      keyOf: (k) => k,
      retryDelayMs: 1,
      maxRetryDelayMs: 2,
      maxQueued: 2,
      process: () => new Promise<void>((r) => (release ??= r)),
      onDrop: (k, reason) => dropped.push(`${k}: ${reason}`),
    });
    assert.equal(q.add('running'), true);
    await turn();
    assert.equal(q.add('b'), true);
    assert.equal(q.add('c'), true);
    assert.equal(q.add('d'), false);
    assert.equal(q.add('running'), false); // would run again afterwards: counts as queued
    assert.deepEqual(dropped, ['d: queue full', 'running: queue full']);
    q.stop();
    release?.();
    await q.idle();
  });

  it('runs a key queued several times while it waits once, with the newest item, in first-queued order', async () => {
    const seen: Item[] = [];
    const q = queueOf(async (i) => void seen.push(i));
    q.add({ key: 'a', version: 1 });
    q.add({ key: 'b', version: 1 });
    q.add({ key: 'a', version: 2 });
    await q.idle();
    assert.deepEqual(seen, [
      { key: 'a', version: 2 },
      { key: 'b', version: 1 },
    ]);
  });

  it('runs a key added while it runs again afterwards with the newest item, not with a retry of the failed one', async () => {
    const seen: Item[] = [];
    let release: ((err?: Error) => void) | undefined;
    const q = queueOf(async (i) => {
      seen.push(i);
      if (seen.length === 1) await new Promise<void>((resolve, reject) => (release = (err) => (err ? reject(err) : resolve())));
    });
    q.add({ key: 'a', version: 1 });
    await turn();
    q.add({ key: 'a', version: 2 });
    q.add({ key: 'a', version: 3 });
    release?.(new Error('boom'));
    await q.idle();
    assert.deepEqual(
      seen.map((i) => i.version),
      [1, 3],
    );
  });

  it('retries a rejection with doubling delays, reporting each error, until it succeeds', async () => {
    const errors: string[] = [];
    const starts: number[] = [];
    const q = queueOf(
      async () => {
        starts.push(performance.now());
        if (starts.length < 4) throw new Error(`failure ${starts.length}`);
      },
      { retryDelayMs: 10, maxRetryDelayMs: 20, onError: (i, err) => errors.push(`${i.key}: ${(err as Error).message}`) },
    );
    q.add({ key: 'a', version: 1 });
    await q.idle();
    assert.equal(starts.length, 4);
    assert.deepEqual(errors, ['a: failure 1', 'a: failure 2', 'a: failure 3']);
    const gaps = starts.slice(1).map((t, i) => t - (starts[i] as number));
    // 10, 20, then capped at 20 (timers never fire early on the monotonic clock; allow its millisecond rounding).
    assert.ok((gaps[0] as number) >= 9 && (gaps[1] as number) >= 19 && (gaps[2] as number) >= 19, `gaps ${gaps.join(', ')}`);
  });

  it('drops a key after maxAttempts failures, with the last error; a later add starts afresh', async () => {
    const dropped: string[] = [];
    let runs = 0;
    const q = queueOf(
      async () => {
        runs += 1;
        throw new Error(`failure ${runs}`);
      },
      { maxAttempts: 3, onDrop: (k, reason, err) => dropped.push(`${k}: ${reason}: ${(err as Error).message}`) },
    );
    q.add({ key: 'a', version: 1 });
    await q.idle();
    assert.equal(runs, 3);
    assert.deepEqual(dropped, ['a: too many attempts: failure 3']);
    q.add({ key: 'a', version: 2 });
    await q.idle();
    assert.equal(runs, 6);
  });

  it('a fresh add supersedes the backoff wait of its key', async () => {
    const seen: number[] = [];
    const q = queueOf(
      async (i) => {
        seen.push(i.version);
        if (i.version === 1) throw new Error('boom');
      },
      { retryDelayMs: 60_000, maxRetryDelayMs: 60_000 },
    );
    q.add({ key: 'a', version: 1 });
    await turn();
    await turn();
    q.add({ key: 'a', version: 2 });
    await q.idle(); // would take a minute if the retry still waited
    assert.deepEqual(seen, [1, 2]);
  });

  it('runs different keys at once up to its concurrency', async () => {
    for (const [concurrency, expected] of [
      [1, 1],
      [2, 2],
      [undefined, 3],
    ] as const) {
      let active = 0;
      let most = 0;
      const q = queueOf(
        async () => {
          active += 1;
          most = Math.max(most, active);
          await new Promise((r) => setTimeout(r, 5));
          active -= 1;
        },
        concurrency === undefined ? {} : { concurrency },
      );
      for (const key of ['a', 'b', 'c']) q.add({ key, version: 1 });
      await q.idle();
      assert.equal(most, expected, `concurrency ${concurrency}`);
    }
  });

  it('spaces starts beyond the burst by the rate', async () => {
    const starts: number[] = [];
    // The bucket's own clock: the spacing then holds however late timers fire or the wall clock steps.
    const now = () => performance.now();
    const q = queueOf(async () => void starts.push(now()), { rate: { perSecond: 50, burst: 2 }, now });
    for (const key of ['a', 'b', 'c', 'd']) q.add({ key, version: 1 });
    await q.idle();
    assert.equal(starts.length, 4);
    // Two at once from the burst, then one token each 20 ms.
    assert.ok((starts[3] as number) - (starts[0] as number) >= 40, `starts ${starts.map((t) => t - (starts[0] as number)).join(', ')}`);
  });

  it('stop drops what is queued and cancels retries; a running item finishes without a retry', async () => {
    const seen: string[] = [];
    let release: ((err?: Error) => void) | undefined;
    const q = queueOf(
      async (i) => {
        seen.push(i.key);
        if (i.key === 'a') await new Promise<void>((resolve, reject) => (release = (err) => (err ? reject(err) : resolve())));
        else throw new Error('boom');
      },
      { concurrency: 2, retryDelayMs: 60_000, maxRetryDelayMs: 60_000 },
    );
    q.add({ key: 'a', version: 1 });
    q.add({ key: 'b', version: 1 });
    await turn();
    await turn();
    q.add({ key: 'c', version: 1 });
    q.stop();
    assert.equal(q.add({ key: 'd', version: 1 }), false);
    release?.(new Error('boom'));
    await q.idle();
    assert.deepEqual(seen, ['a', 'b']);
  });
});
