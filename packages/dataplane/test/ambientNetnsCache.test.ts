import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AmbientDataplaneError, createNetnsHandle, createPodNetnsCache, type NetnsHandle } from '@istio-cni/dataplane';

const wl = { name: 'foo', namespace: 'bar', serviceAccount: 'sa' };

function handles() {
  const open = new Set<number>();
  let fd = 10;
  return {
    open,
    make(inode: number): NetnsHandle {
      const f = fd++;
      open.add(f);
      return createNetnsHandle({ fd: f, inode, source: `ns-${f}`, release: (x) => open.delete(x) });
    },
  };
}

test('upserting the same inode keeps the cached handle and closes the new one', () => {
  const h = handles();
  const cache = createPodNetnsCache();
  const first = h.make(1);
  assert.equal(cache.upsert('uid', wl, first), first);
  const second = h.make(1);
  assert.equal(cache.upsert('uid', { ...wl, serviceAccount: 'other' }, second), first);
  assert.equal(second.closed, true);
  assert.equal(first.closed, false);
  assert.deepEqual([...h.open], [first.fd]);
  assert.equal(cache.snapshot()[0]?.workload.serviceAccount, 'other');
});

test('upserting a different inode replaces the handle and closes the old one', () => {
  const h = handles();
  const cache = createPodNetnsCache();
  const first = h.make(1);
  cache.upsert('uid', wl, first);
  const second = h.make(2);
  assert.equal(cache.upsert('uid', wl, second), second);
  assert.equal(first.closed, true);
  assert.equal(cache.get('uid'), second);
  assert.deepEqual([...h.open], [second.fd]);
});

test('ensure adds a placeholder that appears in the snapshot without netns', () => {
  const cache = createPodNetnsCache();
  cache.ensure('123', wl);
  assert.deepEqual(cache.snapshot(), [{ uid: '123', workload: wl }]);
  assert.equal(cache.has('123'), true);
  assert.equal(cache.get('123'), undefined);
  const h = handles();
  const ns = h.make(7);
  cache.upsert('123', wl, ns);
  cache.ensure('123', wl);
  assert.equal(cache.get('123'), ns, 'ensure never drops a known netns');
});

test('take hands the handle over once; a second take finds nothing', () => {
  const h = handles();
  const cache = createPodNetnsCache();
  const ns = h.make(1);
  cache.upsert('uid', wl, ns);
  assert.equal(cache.take('uid'), ns);
  assert.equal(ns.closed, false, 'the taker closes it');
  assert.equal(cache.take('uid'), undefined);
  assert.equal(cache.has('uid'), false);
});

test('remove and closeAll close every handle the cache owns', () => {
  const h = handles();
  const cache = createPodNetnsCache();
  cache.upsert('a', wl, h.make(1));
  cache.upsert('b', wl, h.make(2));
  cache.ensure('c', wl);
  cache.remove('a');
  assert.equal(h.open.size, 1);
  assert.equal(cache.size, 2);
  cache.closeAll();
  assert.equal(h.open.size, 0);
  assert.equal(cache.size, 0);
});

test('the snapshot has the ZDS shape: uid, workload, and fd + inode when the netns is known', () => {
  const h = handles();
  const cache = createPodNetnsCache();
  cache.upsert('a', wl, h.make(5));
  cache.ensure('b', wl);
  const snap = cache
    .snapshot()
    .map((e) => ({ uid: e.uid, workload: e.workload, ...(e.netns ? { netns: { fd: e.netns.fd, inode: e.netns.inode } } : {}) }));
  assert.deepEqual(snap, [
    { uid: 'a', workload: wl, netns: { fd: 10, inode: 5 } },
    { uid: 'b', workload: wl },
  ]);
});

test('a handle closed while in use keeps its fd until the use settles', async () => {
  const h = handles();
  const ns = h.make(1);
  let release!: () => void;
  const inUse = ns.use(() => new Promise<void>((r) => (release = r)));
  ns.close();
  assert.equal(ns.closed, true);
  assert.equal(h.open.size, 1, 'still pinned');
  release();
  await inUse;
  assert.equal(h.open.size, 0);
  await assert.rejects(
    ns.use(async () => 1),
    (err: unknown) => err instanceof AmbientDataplaneError && err.code === 'ERR_AMBIENT_NETNS',
  );
});

test('the path other processes open is this process fd entry', () => {
  const ns = createNetnsHandle({ fd: 42, inode: 1, source: 'x', release: () => {} });
  assert.equal(ns.path, `/proc/${process.pid}/fd/42`);
});
