import assert from 'node:assert/strict';
import { closeSync, fstatSync, mkdtempSync, openSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import {
  connectSeqpacket,
  createZtunnelServer,
  decodeWorkloadRequest,
  encodeZdsHello,
  encodeWorkloadResponse,
  SeqpacketError,
  ZdsError,
  type PodSnapshotEntry,
  type ZtunnelServer,
  type ZtunnelServerOptions,
} from '@istio-cni/dataplane';
import { startFakeZtunnel, type FakeZtunnel, type FakeZtunnelOptions } from '../../../test/support/fakeZtunnel.ts';

// Stand-ins for pod network namespaces that need no root: distinct namespace files of this process.
const NS = { a: '/proc/self/ns/net', b: '/proc/self/ns/uts', c: '/proc/self/ns/ipc', d: '/proc/self/ns/mnt' } as const;
const workload = (name: string) => ({ name, namespace: 'default', serviceAccount: `sa-${name}` });

interface Rig {
  path: string;
  server: ZtunnelServer;
  cache: Map<string, PodSnapshotEntry>;
  gauge: number[];
  expected: Map<string, string>;
  open(path: string): number;
  fake(options?: Partial<FakeZtunnelOptions>): Promise<FakeZtunnel>;
  /** Resolves once the server counts `n` connections. */
  connections(n: number): Promise<void>;
  logs: string[];
}

async function rig(t: TestContext, options: Partial<ZtunnelServerOptions> = {}): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'zds-'));
  const path = join(dir, 'ztunnel.sock');
  const cache = new Map<string, PodSnapshotEntry>();
  const gauge: number[] = [];
  const logs: string[] = [];
  const expected = new Map<string, string>();
  const fds: number[] = [];
  const fakes: FakeZtunnel[] = [];
  const changed = new Set<() => void>();
  const log = (level: string) => (msg: string, fields?: Record<string, unknown>) =>
    logs.push(`${level}: ${msg} ${JSON.stringify(fields ?? {})}`);
  const server = createZtunnelServer({
    path,
    pods: { readCurrentPodSnapshot: () => new Map(cache) },
    onConnectionCount: (n) => {
      gauge.push(n);
      for (const f of changed) f();
    },
    acceptsPerSecond: 1000,
    logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
    ...options,
  });
  server.start();
  t.after(async () => {
    for (const f of fakes) f.close();
    await server.close();
    for (const fd of fds) closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    path,
    server,
    cache,
    gauge,
    expected,
    logs,
    open(p) {
      const fd = openSync(p, 'r');
      fds.push(fd);
      return fd;
    },
    async fake(fakeOptions = {}) {
      const f = await startFakeZtunnel({ path, expectedNetns: (uid) => expected.get(uid), ...fakeOptions });
      fakes.push(f);
      return f;
    },
    async connections(n) {
      if (server.connectionCount() === n) return;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          changed.delete(check);
          reject(new Error(`server never had ${n} connections; gauge ${gauge.join(',')}`));
        }, 10_000);
        const check = () => {
          if (server.connectionCount() !== n) return;
          clearTimeout(timer);
          changed.delete(check);
          resolve();
        };
        changed.add(check);
      });
    },
  };
}

function addPod(r: Rig, uid: string, ns: string | undefined): void {
  if (ns === undefined) {
    r.cache.set(uid, { workload: workload(uid) });
    return;
  }
  r.cache.set(uid, { workload: workload(uid), netnsFd: r.open(ns) });
  r.expected.set(uid, ns);
}

const zdsCode = (code: string) => (err: unknown) => err instanceof ZdsError && err.code === code && err.retryable;

test('snapshot: Add with one fd per cached pod with a netns, Keep for pods without, then SnapshotSent', async (t) => {
  const r = await rig(t);
  addPod(r, 'pod-a', NS.a);
  addPod(r, 'pod-b', NS.b);
  addPod(r, 'pod-c', undefined);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  assert.deepEqual(z.log, ['add:pod-a', 'add:pod-b', 'keep:pod-c', 'snapshot_sent']);
  assert.deepEqual(z.fdProblems, []);
  assert.deepEqual(
    z.adds.map((a) => [a.uid, a.inode, a.inSnapshot]),
    [
      ['pod-a', statSync(NS.a).ino, true],
      ['pod-b', statSync(NS.b).ino, true],
    ],
  );
  assert.deepEqual(z.adds[0]?.workload, { name: 'pod-a', namespace: 'default', service_account: 'sa-pod-a' });
  assert.deepEqual(z.keeps, ['pod-c']);
});

test('empty cache: the snapshot is just SnapshotSent', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  assert.deepEqual(z.log, ['snapshot_sent']);
});

test('podAdded sends Add with the netns fd after the snapshot and resolves on the ack', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  r.expected.set('pod-new', NS.c);
  const fd = openSync(NS.c, 'r');
  const adding = r.server.podAdded('pod-new', workload('pod-new'), fd);
  closeSync(fd); // the server has its own duplicate already
  await adding;
  assert.deepEqual(z.fdProblems, []);
  assert.deepEqual(
    z.adds.map((a) => [a.uid, a.inode, a.inSnapshot]),
    [['pod-new', statSync(NS.c).ino, false]],
  );
  assert.equal(fstatSync(z.netnsFd('pod-new') ?? -1).ino, statSync(NS.c).ino);
});

test('no ztunnel connected: podAdded fails with a retryable "no ztunnel connection"', async (t) => {
  const r = await rig(t);
  const fd = r.open(NS.a);
  await assert.rejects(
    r.server.podAdded('p', workload('p'), fd),
    (err) => zdsCode('ERR_ZDS_NO_CONNECTION')(err) && /no ztunnel connection/.test((err as Error).message),
  );
  await r.server.podDeleted('p'); // nothing to tell, nothing fails
});

test('an ack error fails podAdded (retryable) and keeps the connection', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  z.refuse = (req) => ('add' in req ? 'netns gone' : undefined);
  await assert.rejects(
    r.server.podAdded('p', workload('p'), r.open(NS.a)),
    (err) => zdsCode('ERR_ZDS_ACK_ERROR')(err) && /netns gone/.test((err as Error).message),
  );
  assert.equal(r.server.connectionCount(), 1);
  z.refuse = undefined;
  await r.server.podAdded('p', workload('p'), r.open(NS.a));
});

test('invalid arguments are refused without touching any connection', async (t) => {
  const r = await rig(t);
  await assert.rejects(
    r.server.podAdded('', workload('p'), 3),
    (err) => err instanceof ZdsError && err.code === 'ERR_ZDS_INVALID_ARGUMENT' && !err.retryable,
  );
  await assert.rejects(r.server.podAdded('p', workload('p'), -1), /netns fd -1/);
  await assert.rejects(r.server.podDeleted(''), (err) => err instanceof ZdsError && err.code === 'ERR_ZDS_INVALID_ARGUMENT');
});

test('a write error drops the connection', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  z.shutdownRead();
  await assert.rejects(
    r.server.podAdded('p', workload('p'), r.open(NS.a)),
    (err) => zdsCode('ERR_ZDS_SEND_FAILED')(err) && /EPIPE/.test((err as Error).message),
  );
  await r.connections(0);
  await assert.rejects(r.server.podAdded('p', workload('p'), r.open(NS.a)), zdsCode('ERR_ZDS_NO_CONNECTION'));
});

test('keepalive: a ztunnel that goes away while idle is dropped', async (t) => {
  const r = await rig(t, { keepaliveIntervalMs: 50 });
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  z.drop();
  await r.connections(0);
  assert.deepEqual(r.gauge, [0, 1, 0]);
  assert.ok(
    r.logs.some((l) => l.startsWith('info: ztunnel disconnected (EOF)')),
    r.logs.join('\n'),
  );
});

test('keepalive probes leave a quiet, live ztunnel connected', async (t) => {
  const r = await rig(t, { keepaliveIntervalMs: 10 });
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  await new Promise((resolve) => setTimeout(resolve, 100)); // several keepalive rounds
  assert.equal(r.server.connectionCount(), 1);
  await r.server.podAdded('p', workload('p'), r.open(NS.a));
});

test('two ztunnels: adds go to the newest only, deletes to both; gauge counts both', async (t) => {
  const r = await rig(t);
  addPod(r, 'old-pod', NS.a);
  const first = await r.fake();
  await first.waitFor(() => first.snapshots[0] === 1, 'first snapshot');
  const second = await r.fake();
  await second.waitFor(() => second.snapshots[0] === 1, 'second snapshot');
  assert.deepEqual(second.log, ['add:old-pod', 'snapshot_sent']);
  assert.equal(r.server.connectionCount(), 2);
  assert.deepEqual(r.gauge, [0, 1, 2]);

  r.expected.set('new-pod', NS.b);
  await r.server.podAdded('new-pod', workload('new-pod'), r.open(NS.b));
  assert.deepEqual(second.log.slice(2), ['add:new-pod']);
  assert.deepEqual(first.log, ['add:old-pod', 'snapshot_sent']);

  await r.server.podDeleted('old-pod');
  assert.deepEqual(first.dels, ['old-pod']);
  assert.deepEqual(second.dels, ['old-pod']);
  assert.deepEqual([first.fdProblems, second.fdProblems], [[], []]);
});

test('adds fall back to the previous ztunnel when the newest disconnects', async (t) => {
  const r = await rig(t);
  const first = await r.fake();
  await first.waitFor(() => first.snapshots[0] === 1, 'first snapshot');
  const second = await r.fake();
  await second.waitFor(() => second.snapshots[0] === 1, 'second snapshot');
  second.drop();
  await r.connections(1);
  r.expected.set('p', NS.a);
  await r.server.podAdded('p', workload('p'), r.open(NS.a));
  assert.deepEqual(first.log, ['snapshot_sent', 'add:p']);
  assert.deepEqual(second.adds, []);
});

test('podDeleted does not deadlock with a ztunnel that disconnects mid-delete', async (t) => {
  const r = await rig(t);
  const first = await r.fake();
  await first.waitFor(() => first.snapshots[0] === 1, 'first snapshot');
  const second = await r.fake();
  await second.waitFor(() => second.snapshots[0] === 1, 'second snapshot');
  second.dropOn = (req) => 'del' in req;
  await assert.rejects(r.server.podDeleted('p1'), (err) => zdsCode('ERR_ZDS_CONNECTION_CLOSED')(err) && /p1/.test((err as Error).message));
  assert.deepEqual(first.dels, ['p1']);
  await r.connections(1);
  await r.server.podDeleted('p2');
  assert.deepEqual(first.dels, ['p1', 'p2']);
  await r.server.podAdded('p3', workload('p3'), r.open(NS.a));
  assert.deepEqual(
    first.adds.map((a) => a.uid),
    ['p3'],
  );
});

test('a ztunnel gone mid-snapshot is dropped; a reconnect gets the full snapshot again', async (t) => {
  const r = await rig(t);
  addPod(r, 'pod-a', NS.a);
  addPod(r, 'pod-b', NS.b);
  const z = await r.fake();
  z.dropOn = (req) => 'add' in req && req.add.uid === 'pod-b';
  await z.waitFor(() => !z.connected && z.log.includes('dropped-on:add'), 'drop mid-snapshot');
  await r.connections(0);
  z.dropOn = undefined;
  await z.reconnect();
  await z.waitFor(() => z.snapshots[1] === 1, 'second snapshot');
  assert.deepEqual(
    z.adds.filter((a) => a.session === 2).map((a) => a.uid),
    ['pod-a', 'pod-b'],
  );
  assert.deepEqual([...z.known].sort(), ['pod-a', 'pod-b']);
  assert.deepEqual(z.fdProblems, []);
});

test('a pod removed from the cache before a reconnect is dropped by ztunnel after SnapshotSent', async (t) => {
  const r = await rig(t);
  addPod(r, 'stays', NS.a);
  addPod(r, 'goes', NS.b);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  r.cache.delete('goes');
  z.drop();
  await r.connections(0);
  await z.reconnect();
  await z.waitFor(() => z.snapshots[1] === 1, 'second snapshot');
  assert.deepEqual([...z.known], ['stays']);
});

test('an ack that does not come in time fails the request but keeps the connection', async (t) => {
  const r = await rig(t, { readWriteTimeoutMs: 50 });
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  z.ackDelayMs = 500;
  await assert.rejects(r.server.podAdded('slow', workload('slow'), r.open(NS.a)), zdsCode('ERR_ZDS_TIMEOUT'));
  assert.equal(r.server.connectionCount(), 1);
});

test('an aborted podAdded rejects; the fd is still sent intact to ztunnel', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  z.ackDelayMs = 100;
  r.expected.set('p', NS.b);
  const abort = new AbortController();
  const adding = r.server.podAdded('p', workload('p'), r.open(NS.b), { signal: abort.signal });
  await z.waitFor(() => z.adds.length === 1, 'add');
  abort.abort();
  await assert.rejects(adding, zdsCode('ERR_ZDS_ABORTED'));
  assert.deepEqual(z.fdProblems, []);
});

/** A raw peer: the server must drop it (EOF on our side) and keep serving the good fake. */
async function assertDropped(r: Rig, misbehave: (peer: Awaited<ReturnType<typeof connectSeqpacket>>) => Promise<void>): Promise<void> {
  const good = await r.fake();
  await good.waitFor(() => good.snapshots.at(-1) === 1, 'snapshot');
  const peer = await connectSeqpacket(r.path);
  try {
    await misbehave(peer);
    for (;;) {
      try {
        await peer.receive({ timeoutMs: 10_000, maxBytes: 4096, acceptFds: true });
      } catch (err) {
        assert.ok(err instanceof SeqpacketError && err.code === 'ERR_SEQPACKET_EOF', `want EOF, got ${String(err)}`);
        break;
      }
    }
  } finally {
    peer.close();
  }
  await r.connections(1);
  r.expected.set('after', NS.c);
  await r.server.podAdded('after', workload('after'), r.open(NS.c));
  assert.deepEqual(
    good.adds.map((a) => a.uid),
    ['after'],
  );
}

async function helloAndSnapshot(peer: Awaited<ReturnType<typeof connectSeqpacket>>): Promise<void> {
  await peer.send(encodeZdsHello({ version: 1 }));
  const got = await peer.receive({ timeoutMs: 5_000 });
  assert.ok('snapshot_sent' in decodeWorkloadRequest(got.data));
  await peer.send(encodeWorkloadResponse({ ack: { error: '' } }));
}

test('garbage instead of a hello: disconnected, the server carries on', async (t) => {
  const r = await rig(t);
  await assertDropped(r, (peer) => peer.send(Buffer.from('garbage!!')));
  assert.ok(
    r.logs.some((l) => /error: failed to handle ztunnel connection.*failed to decode ztunnel hello/.test(l)),
    r.logs.join('\n'),
  );
});

test('a hello with the wrong version: disconnected', async (t) => {
  const r = await rig(t);
  await assertDropped(r, (peer) => peer.send(encodeZdsHello({ version: 7 })));
  assert.ok(
    r.logs.some((l) => /unsupported version 7/.test(l)),
    r.logs.join('\n'),
  );
});

test('an oversized hello (> 1024 bytes, MSG_TRUNC): disconnected', async (t) => {
  const r = await rig(t);
  await assertDropped(r, (peer) => peer.send(Buffer.concat([encodeZdsHello({ version: 1 }), Buffer.alloc(2000)])));
  assert.ok(
    r.logs.some((l) => /MSG_TRUNC/.test(l)),
    r.logs.join('\n'),
  );
});

test('no hello within the deadline: disconnected', async (t) => {
  const r = await rig(t, { readWriteTimeoutMs: 50 });
  await assertDropped(r, async () => {});
  assert.ok(
    r.logs.some((l) => /timed out waiting for ztunnel hello/.test(l)),
    r.logs.join('\n'),
  );
});

test('an unsolicited message after the snapshot: disconnected', async (t) => {
  const r = await rig(t);
  await assertDropped(r, async (peer) => {
    await helloAndSnapshot(peer);
    await peer.send(encodeWorkloadResponse({ ack: { error: '' } }));
  });
  assert.ok(
    r.logs.some((l) => /unexpected message/.test(l)),
    r.logs.join('\n'),
  );
});

test('a garbage ack: disconnected', async (t) => {
  const r = await rig(t);
  await assertDropped(r, async (peer) => {
    await peer.send(encodeZdsHello({ version: 1 }));
    await peer.receive({ timeoutMs: 5_000 });
    await peer.send(Buffer.from([0xff, 0xff, 0xff]));
  });
  assert.ok(
    r.logs.some((l) => /failed to decode ztunnel response to snapshot_sent/.test(l)),
    r.logs.join('\n'),
  );
});

test('an ack without payload: disconnected', async (t) => {
  const r = await rig(t);
  await assertDropped(r, async (peer) => {
    await peer.send(encodeZdsHello({ version: 1 }));
    await peer.receive({ timeoutMs: 5_000 });
    await peer.send(Buffer.from('2200', 'hex')); // only an unknown field 4
  });
  assert.ok(
    r.logs.some((l) => /carries no ack/.test(l)),
    r.logs.join('\n'),
  );
});

test('close(): connections end, the socket file goes, requests fail', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  await r.server.close();
  await z.waitFor(() => !z.connected, 'disconnect');
  assert.equal(existsSync(r.path), false);
  assert.equal(r.gauge.at(-1), 0);
  await assert.rejects(r.server.podAdded('p', workload('p'), r.open(NS.a)), zdsCode('ERR_ZDS_NO_CONNECTION'));
});

test('the socket is created mode 0600 and replaces a stale one', async (t) => {
  const r = await rig(t);
  assert.equal(statSync(r.path).mode & 0o777, 0o600);
  await r.server.close();
  const again = createZtunnelServer({ path: r.path, pods: { readCurrentPodSnapshot: () => new Map() } });
  t.after(() => again.close());
  assert.ok(statSync(r.path).isSocket());
});

test('hasPod: unknown until the snapshot is acked, then what the newest ztunnel acked (add/keep yes, ack error or del no)', async (t) => {
  const r = await rig(t);
  assert.equal(r.server.hasPod('pod-a'), undefined, 'no ztunnel connected');
  addPod(r, 'pod-a', NS.a);
  addPod(r, 'pod-b', undefined);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  for (let i = 0; i < 200 && r.server.hasPod('pod-a') === undefined; i++) await new Promise((res) => setTimeout(res, 5));
  assert.equal(r.server.hasPod('pod-a'), true, 'added in the snapshot');
  assert.equal(r.server.hasPod('pod-b'), true, 'kept in the snapshot');
  assert.equal(r.server.hasPod('pod-c'), false);
  z.refuse = (req) => ('add' in req ? 'netns gone' : undefined);
  await assert.rejects(r.server.podAdded('pod-c', workload('pod-c'), r.open(NS.c)));
  assert.equal(r.server.hasPod('pod-c'), false, 'an ack error is not an ack');
  z.refuse = undefined;
  await r.server.podAdded('pod-c', workload('pod-c'), r.open(NS.c));
  assert.equal(r.server.hasPod('pod-c'), true);
  await r.server.podDeleted('pod-a');
  assert.equal(r.server.hasPod('pod-a'), false);
});

test('a peer whose uid is not allowed is disconnected before any pod is sent, and named in the log', async (t) => {
  const own = process.geteuid?.() ?? 0;
  const r = await rig(t, { peerUids: new Set([own + 1]) });
  addPod(r, 'pod-a', NS.a);
  const peer = await connectSeqpacket(r.path);
  t.after(() => peer.close());
  // The server closes the connection at accept: the peer reads EOF, never a snapshot.
  await assert.rejects(
    peer.receive({ timeoutMs: 10_000, maxBytes: 4096, acceptFds: true }),
    (err: unknown) => err instanceof SeqpacketError && err.code === 'ERR_SEQPACKET_EOF',
  );
  assert.equal(r.server.connectionCount(), 0);
  assert.ok(
    r.logs.some(
      (l) => l.startsWith('warn: refused a ZDS connection') && l.includes(`"peer_uid":${own}`) && l.includes(`"peer_pid":${process.pid}`),
    ),
    r.logs.join('\n'),
  );
});

test('by default root and the agent own uid are allowed: this process, as its own peer, connects', async (t) => {
  const r = await rig(t);
  const z = await r.fake();
  await z.waitFor(() => z.snapshots[0] === 1, 'snapshot');
  assert.equal(r.logs.filter((l) => l.includes('refused a ZDS connection')).length, 0);
});
