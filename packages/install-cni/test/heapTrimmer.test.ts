import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startHeapTrimmer, v8Heap, type HeapAccess } from '../src/heapTrimmer.ts';
import { captureLogger } from './testHelpers.ts';

const MiB = 1024 * 1024;

/** A heap whose committed size the test sets; a collection brings it down to `live`. */
function fakeHeap(committed: number, live: number): HeapAccess & { committed: number; live: number; collections: number } {
  const heap = {
    committed,
    live,
    collections: 0,
    committedBytes: () => heap.committed,
    collect() {
      heap.collections++;
      heap.committed = heap.live;
    },
  };
  return heap;
}

function trimmer(heap: HeapAccess) {
  const log = captureLogger();
  const t = startHeapTrimmer({ intervalMs: 0, heap, logger: log.logger });
  return { t, log };
}

test('a heap that has not grown by the threshold since the start is left alone', () => {
  const heap = fakeHeap(20 * MiB, 15 * MiB);
  const { t, log } = trimmer(heap);
  assert.equal(t.check(), false);
  heap.committed += MiB - 1;
  assert.equal(t.check(), false);
  assert.equal(heap.collections, 0);
  assert.deepEqual(log.lines, []);
});

test('growth by the threshold collects once, and growth counts again from the level after it', () => {
  const heap = fakeHeap(16 * MiB, 15 * MiB);
  const { t, log } = trimmer(heap);
  heap.committed = 19 * MiB;
  assert.equal(t.check(), true);
  assert.equal(heap.collections, 1);
  assert.equal(heap.committed, 15 * MiB);
  assert.equal(log.lines[0]?.msg, 'heap trimmed');
  assert.equal(log.lines[0]?.committedMiB, 19);
  assert.equal(log.lines[0]?.afterMiB, 15);
  // 15.5 MiB: grown 0.5 MiB over the level after the collection, not over the start's 16.
  heap.committed = 15.5 * MiB;
  assert.equal(t.check(), false);
  heap.committed = 16 * MiB;
  assert.equal(t.check(), true);
  assert.equal(heap.collections, 2);
});

test('memory V8 hands back by itself lowers the mark growth is measured from', () => {
  const heap = fakeHeap(20 * MiB, 12 * MiB);
  const { t } = trimmer(heap);
  heap.committed = 14 * MiB; // V8's memory reducer ran
  assert.equal(t.check(), false);
  heap.committed = 15 * MiB;
  assert.equal(t.check(), true, 'grown 1 MiB over 14, though 5 below the start');
});

test('a collection that throws is logged once and trimming stops; the daemon goes on', () => {
  const heap = fakeHeap(16 * MiB, 15 * MiB);
  heap.collect = () => {
    heap.collections++;
    throw new Error('no gc here');
  };
  const { t, log } = trimmer(heap);
  heap.committed = 20 * MiB;
  assert.equal(t.check(), false);
  assert.equal(t.check(), false);
  assert.equal(heap.collections, 1);
  assert.deepEqual(
    log.lines.map((l) => [l.level, l.msg, l.error]),
    [['warn', 'heap trim failed; no more trims until restart', 'no gc here']],
  );
});

test('HEAP_TRIM_INTERVAL=0 starts no timer; with an interval the timer does not keep the process alive', () => {
  const heap = fakeHeap(16 * MiB, 15 * MiB);
  const off = startHeapTrimmer({ intervalMs: 0, heap, logger: captureLogger().logger });
  const on = startHeapTrimmer({ intervalMs: 60_000, heap, logger: captureLogger().logger });
  const timers = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  assert.equal(timers, 0, 'the interval timer is unref()ed and none is started at 0');
  off.stop();
  on.stop();
});

test("V8's heap: a collection runs, frees garbage, and leaves no gc function on the daemon's global", async () => {
  const heap = v8Heap();
  assert.ok(heap.committedBytes() > 0);
  const ref = ((): WeakRef<object> => new WeakRef(Array.from({ length: 1000 }, (_, i) => ({ i }))))();
  // A WeakRef's target lives until the end of the job that created or read it.
  await new Promise((resolve) => setImmediate(resolve));
  heap.collect();
  assert.ok(ref.deref() === undefined, 'the collection freed an unreachable object');
  assert.ok(!('gc' in globalThis));
  heap.collect(); // the second call reuses the function
});
