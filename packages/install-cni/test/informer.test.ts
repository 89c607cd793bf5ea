import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { createJsonLogger } from '@istio-cni/handoff';
import type { KubeClient } from '@istio-cni/kube';
import { ObjectStore } from '../src/kube/clusterView.ts';
import { POD_TYPE } from '../src/kube/coreV1Schemas.ts';
import { runInformer } from '../src/kube/informer.ts';
import { envelope, fields, message, watchFrame } from '../../../test/support/protobufEncode.ts';
import type { ServerResponse } from 'node:http';
import { scriptedKubeApi as scriptedApi, sendJson as json, type SeenRequest } from '../../../test/support/scriptedKubeApi.ts';
import { waitFor } from './testHelpers.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

const pod = (name: string, rv: string) => ({
  metadata: { name, namespace: 'default', resourceVersion: rv, managedFields: [{ manager: 'x' }] },
});
const line = (type: string, o: unknown) => JSON.stringify({ type, object: o }) + '\n';
const endOfInitialEvents = (rv: string) =>
  line('BOOKMARK', { kind: 'Pod', metadata: { resourceVersion: rv, annotations: { 'k8s.io/initial-events-end': 'true' } } });
const streaming = (r: SeenRequest) => r.url.searchParams.get('sendInitialEvents') === 'true';
const plainWatches = (seen: SeenRequest[]) =>
  seen.filter((r) => r.url.searchParams.get('watch') === 'true' && !streaming(r)).map((r) => r.url.searchParams);

/** A pod informer on `client` (stopped after the test) and the changes its store emits, as `<type> <name>`. */
function podInformer(t: TestContext, client: KubeClient, fieldSelector?: string) {
  const store = new ObjectStore<ReturnType<typeof pod>>();
  const events: string[] = [];
  store.onChange((type, o) => events.push(`${type} ${o.metadata.name}`));
  const informer = runInformer(client, {
    what: 'pod',
    path: '/api/v1/pods',
    ...(fieldSelector === undefined ? {} : { fieldSelector }),
    store,
    logger,
    retryDelayMs: 5,
  });
  t.after(() => informer.stop());
  return { store, events, informer };
}

/** Answers a streaming list as an API server with the WatchList feature off does; true when it did. */
function refuseStreaming(req: SeenRequest, res: ServerResponse): boolean {
  if (!streaming(req)) return false;
  json(res, 422, {
    kind: 'Status',
    code: 422,
    reason: 'Invalid',
    message: 'sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled',
  });
  return true;
}

describe('informer', () => {
  it('without streaming lists: lists every page, resumes the watch from the last bookmark, and on 410 re-lists with a diff (delete for what vanished, nothing for what is unchanged)', async (t) => {
    let watches = 0;
    let lists = 0;
    const { seen, client } = await scriptedApi(t, (req, res) => {
      if (refuseStreaming(req, res)) return;
      if (req.url.searchParams.get('watch') !== 'true') {
        lists++;
        if (lists === 1 && req.url.searchParams.get('continue') === null) {
          json(res, 200, { metadata: { resourceVersion: '10', continue: 'page2' }, items: [pod('a', '5')] });
        } else if (lists === 2) {
          json(res, 200, { metadata: { resourceVersion: '10' }, items: [pod('b', '6')] });
        } else {
          // After the 410: a is unchanged, b is gone, c is new.
          json(res, 200, { metadata: { resourceVersion: '30' }, items: [pod('a', '5'), pod('c', '29')] });
        }
        return;
      }
      watches++;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      if (watches === 1) {
        res.write(JSON.stringify({ type: 'MODIFIED', object: pod('a', '5') }) + '\n');
        res.end(JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '20' } } }) + '\n');
      } else if (watches === 2) {
        res.end(
          JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } }) +
            '\n',
        );
      } else {
        res.write(JSON.stringify({ type: 'ADDED', object: pod('d', '31') }) + '\n');
      }
    });
    const { store, events, informer } = podInformer(t, client, 'spec.nodeName=n1');
    await informer.synced;
    assert.deepEqual(
      store.list().map((p) => p.metadata.name),
      ['a', 'b'],
      'both pages',
    );
    assert.equal(store.get('default', 'a')?.metadata.managedFields, undefined, 'managedFields dropped');
    await waitFor('d', () => store.get('default', 'd'));
    assert.deepEqual(events, ['add a', 'add b', 'update a', 'add c', 'delete b', 'add d']);
    assert.equal(seen.filter(streaming).length, 1, 'the refused streaming list is not asked for again');
    const watchUrls = plainWatches(seen);
    assert.equal(watchUrls[0]?.get('resourceVersion'), '10');
    assert.equal(watchUrls[1]?.get('resourceVersion'), '20', 'resumed from the bookmark');
    assert.equal(watchUrls[2]?.get('resourceVersion'), '30', 'watch from the new list');
    assert.equal(watchUrls[0]?.get('fieldSelector'), 'spec.nodeName=n1');
    assert.equal(watchUrls[0]?.get('allowWatchBookmarks'), 'true');
    assert.equal(seen[2]?.url.searchParams.get('continue'), 'page2');
  });

  it('retries a failing list with backoff and syncs once the API answers', async (t) => {
    let lists = 0;
    const { client } = await scriptedApi(
      t,
      (req, res) => {
        if (refuseStreaming(req, res)) return;
        if (req.url.searchParams.get('watch') === 'true') {
          res.writeHead(200);
          return;
        }
        lists++;
        if (lists < 3) json(res, 500, { kind: 'Status', message: 'etcd unavailable', code: 500 });
        else json(res, 200, { metadata: { resourceVersion: '1' }, items: [pod('a', '1')] });
      },
      { maxAttempts: 1 },
    ); // the informer's own retries, without the client's
    const warnings: string[] = [];
    const log = createJsonLogger({
      scope: 'test',
      threshold: 'warn',
      sink: (l) => warnings.push((JSON.parse(l) as { error: string }).error),
    });
    const store = new ObjectStore<ReturnType<typeof pod>>();
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store, logger: log, retryDelayMs: 5 });
    t.after(() => informer.stop());
    await informer.synced;
    assert.equal(lists, 3);
    assert.equal(warnings.length, 2);
    assert.match(warnings[0] ?? '', /HTTP 500: etcd unavailable/);
  });

  it('recovers from a stream cut mid-object and a 429 on re-list without losing or repeating an event', async (t) => {
    let watches = 0;
    let lists = 0;
    const waits: number[] = [];
    const { seen, client } = await scriptedApi(
      t,
      (req, res) => {
        if (refuseStreaming(req, res)) return;
        if (req.url.searchParams.get('watch') !== 'true') {
          lists++;
          if (lists === 1) json(res, 200, { metadata: { resourceVersion: '10' }, items: [pod('a', '5')] });
          else if (lists === 2) {
            res.setHeader('Retry-After', '1');
            json(res, 429, { kind: 'Status', code: 429, reason: 'TooManyRequests', message: 'too many requests' });
          } else json(res, 200, { metadata: { resourceVersion: '30' }, items: [pod('a', '5'), pod('b', '11'), pod('c', '12')] });
          return;
        }
        watches++;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        if (watches === 1) {
          const cut = line('ADDED', pod('c', '12'));
          res.write(line('ADDED', pod('b', '11')) + cut.slice(0, cut.length / 2), () => res.socket?.destroy());
        } else if (watches === 2) {
          res.write(line('ADDED', pod('c', '12')));
          res.end(line('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' }));
        } else {
          res.write(line('ADDED', pod('d', '31')));
        }
      },
      { sleep: async (ms) => void waits.push(ms) },
    );
    const { store, events } = podInformer(t, client);
    await waitFor('d', () => store.get('default', 'd'));
    assert.deepEqual(events, ['add a', 'add b', 'add c', 'add d'], 'each object once, none lost');
    const watchRvs = plainWatches(seen).map((q) => q.get('resourceVersion'));
    assert.deepEqual(watchRvs, ['10', '11', '30'], 'resumed after the last whole event, then from the new list');
    assert.equal(lists, 3);
    assert.ok(
      waits.some((w) => w >= 1000),
      `Retry-After honoured: ${waits.join(',')}`,
    );
  });

  it('stopped while its list is in flight: opens no watch', async (t) => {
    const { seen, client } = await scriptedApi(t, (req, res) => {
      if (refuseStreaming(req, res)) return;
      setTimeout(() => json(res, 200, { metadata: { resourceVersion: '1' }, items: [] }), 50);
    });
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store: new ObjectStore<ReturnType<typeof pod>>(), logger });
    await waitFor('the list request', () => seen.length === 2 || undefined);
    informer.stop();
    await new Promise((r) => setTimeout(r, 150));
    assert.deepEqual(
      seen.map((r) => [r.url.searchParams.get('watch'), streaming(r)]),
      [
        ['true', true],
        [null, false],
      ],
      'the refused streaming list, then only the list',
    );
  });
  it('syncs from a streaming list: no LIST, nothing applied before the end marker, resumes from it, re-syncs on 410 with a diff', async (t) => {
    let watches = 0;
    let releaseEnd!: () => void;
    const endSent = new Promise<void>((r) => (releaseEnd = r));
    const { seen, client } = await scriptedApi(t, (req, res) => {
      assert.equal(req.url.searchParams.get('watch'), 'true', 'only watches');
      watches++;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      if (watches === 1) {
        res.write(line('ADDED', pod('a', '5')) + line('ADDED', pod('b', '6')));
        // A progress bookmark in the middle of the initial events is not their end.
        res.write(line('BOOKMARK', { kind: 'Pod', metadata: { resourceVersion: '7' } }));
        void endSent.then(() => res.end(endOfInitialEvents('10') + line('MODIFIED', pod('a', '12'))));
      } else if (watches === 2) {
        res.end(line('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' }));
      } else if (watches === 3) {
        // The re-sync: a unchanged since the event, b gone, c new; then a live event.
        res.write(line('ADDED', pod('a', '12')) + line('ADDED', pod('c', '29')) + endOfInitialEvents('30'));
        res.write(line('ADDED', pod('d', '31')));
      }
    });
    const { store, events, informer } = podInformer(t, client, 'spec.nodeName=n1');
    let synced = false;
    void informer.synced.then(() => (synced = true));
    await waitFor('the streaming list', () => seen.length === 1 || undefined);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(synced, false, 'not synced before the end marker');
    assert.deepEqual(events, [], 'nothing applied before the end marker');
    releaseEnd();
    await informer.synced;
    await waitFor('d', () => store.get('default', 'd'));
    assert.equal(store.get('default', 'a')?.metadata.managedFields, undefined, 'managedFields dropped');
    assert.deepEqual(events, ['add a', 'add b', 'update a', 'add c', 'delete b', 'add d']);
    const queries = seen.map((r) => r.url.searchParams);
    for (const q of [queries[0], queries[2]]) {
      assert.equal(q?.get('sendInitialEvents'), 'true');
      assert.equal(q?.get('resourceVersionMatch'), 'NotOlderThan');
      assert.equal(q?.get('allowWatchBookmarks'), 'true');
      assert.equal(q?.get('resourceVersion'), null, 'a consistent read');
      assert.equal(q?.get('fieldSelector'), 'spec.nodeName=n1');
    }
    assert.equal(queries[1]?.get('sendInitialEvents'), null, 'resumed as a plain watch');
    assert.equal(queries[1]?.get('resourceVersion'), '12', 'from the last event after the end marker');
  });

  it('a stream that breaks after the sync is followed by a streaming sync not older than its last event, not a resume', async (t) => {
    let watches = 0;
    const { seen, client } = await scriptedApi(t, (_req, res) => {
      watches++;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      if (watches === 1) {
        // The API server dies after one more event.
        res.write(line('ADDED', pod('a', '5')) + endOfInitialEvents('10') + line('ADDED', pod('b', '12')), () => res.socket?.destroy());
      } else {
        // The new one's state: a gone meanwhile, b unchanged, c new.
        res.write(line('ADDED', pod('b', '12')) + line('ADDED', pod('c', '20')) + endOfInitialEvents('21'));
      }
    });
    const { events } = podInformer(t, client);
    await waitFor('c', () => events.includes('add c') || undefined);
    assert.deepEqual(events, ['add a', 'add b', 'add c', 'delete a']);
    const second = seen[1]?.url.searchParams;
    assert.equal(second?.get('sendInitialEvents'), 'true');
    assert.equal(second?.get('resourceVersionMatch'), 'NotOlderThan');
    assert.equal(second?.get('resourceVersion'), '12', 'not older than the last event seen');
    assert.equal(seen.length, 2, 'one request to sync again');
  });

  it('a streaming list cut before its end marker is started again; a server that ends it without the marker is listed instead', async (t) => {
    let watches = 0;
    let lists = 0;
    const { seen, client } = await scriptedApi(t, (req, res) => {
      if (req.url.searchParams.get('watch') !== 'true') {
        lists++;
        json(res, 200, { metadata: { resourceVersion: '40' }, items: [pod('a', '5'), pod('c', '39')] });
        return;
      }
      watches++;
      res.writeHead(200, { 'Content-Type': 'application/json' });
      if (watches === 1) {
        const cut = line('ADDED', pod('b', '6'));
        res.write(line('ADDED', pod('a', '5')) + cut.slice(0, cut.length / 2), () => res.socket?.destroy());
      } else if (watches === 2) {
        // Ignores sendInitialEvents: the old "current state as ADDED" watch, ended by its timeout.
        res.end(line('ADDED', pod('a', '5')) + line('ADDED', pod('b', '6')));
      }
    });
    const { events, informer } = podInformer(t, client);
    await informer.synced;
    await waitFor('the watch from the list', () => seen.length >= 4 || undefined);
    assert.deepEqual(events, ['add a', 'add c'], 'only what the list holds, once');
    assert.equal(lists, 1);
    assert.deepEqual(
      seen.map((r) =>
        r.url.searchParams.get('watch') === 'true'
          ? streaming(r)
            ? 'stream'
            : `watch@${r.url.searchParams.get('resourceVersion')}`
          : 'list',
      ),
      ['stream', 'stream', 'list', 'watch@40'],
    );
  });

  it('with a protobuf type: asks for protobuf, and keeps only its fields whether the pods came in protobuf, a JSON watch or a JSON list', async (t) => {
    const full = {
      metadata: { name: 'j', namespace: 'default', resourceVersion: '3', generateName: 'j-', managedFields: [{ manager: 'x' }] },
      spec: { nodeName: 'n1', dnsPolicy: 'ClusterFirst', containers: [{ name: 'app', image: 'app' }] },
      status: { phase: 'Running', hostIP: '192.168.0.1' },
    };
    const kept = (name: string, resourceVersion: string) => ({
      metadata: { name, namespace: 'default', resourceVersion },
      spec: { containers: [{ name: 'app' }], nodeName: 'n1' },
      status: { phase: 'Running' },
    });
    const accepts: string[] = [];
    // Pod: metadata 1 (name 1, generateName 2, namespace 3, resourceVersion 6, annotations 12), spec 2, status 3.
    const protobufPod = envelope(
      'Pod',
      message(
        fields({
          1: fields({ 1: 'p', 2: 'p-', 3: 'default', 6: '2' }),
          2: fields({ 2: fields({ 1: 'app', 2: 'app' }), 6: 'ClusterFirst', 10: 'n1' }),
          3: fields({ 1: 'Running', 5: '192.168.0.1' }),
        }),
      ),
    );
    const protobufEnd = envelope(
      'Pod',
      message(fields({ 1: fields({ 6: '2', 12: fields({ 1: 'k8s.io/initial-events-end', 2: 'true' }) }) })),
    );
    const { client } = await scriptedApi(t, (req, res) => {
      accepts.push(String(req.headers.accept));
      if (req.url.searchParams.get('fieldSelector') === 'spec.nodeName=pb') {
        res.writeHead(200, { 'Content-Type': 'application/vnd.kubernetes.protobuf;stream=watch' });
        res.write(Buffer.concat([watchFrame('ADDED', protobufPod), watchFrame('BOOKMARK', protobufEnd)]));
      } else if (req.url.searchParams.get('fieldSelector') === 'spec.nodeName=json') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.write(line('ADDED', full) + endOfInitialEvents('3'));
      } else if (!refuseStreaming(req, res)) {
        if (req.url.searchParams.get('watch') === 'true') res.writeHead(200, { 'Content-Type': 'application/json' });
        else json(res, 200, { metadata: { resourceVersion: '3' }, items: [full] });
      }
    });
    const run = (fieldSelector: string) => {
      const store = new ObjectStore<{ metadata: { name?: string } }>();
      const informer = runInformer(client, {
        what: 'pod',
        path: '/api/v1/pods',
        fieldSelector,
        store,
        protobuf: POD_TYPE,
        logger,
        retryDelayMs: 5,
      });
      t.after(() => informer.stop());
      return informer.synced.then(() => store.list());
    };
    assert.deepEqual(await run('spec.nodeName=pb'), [kept('p', '2')]);
    assert.deepEqual(await run('spec.nodeName=json'), [kept('j', '3')]);
    assert.deepEqual(await run('spec.nodeName=list'), [kept('j', '3')]);
    assert.ok(accepts.length >= 4);
    for (const a of accepts.slice(0, 2))
      assert.equal(a, 'application/vnd.kubernetes.protobuf, application/json', 'watches ask for protobuf');
  });
});
