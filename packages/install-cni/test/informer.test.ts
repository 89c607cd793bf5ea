import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createJsonLogger } from '@istio-cni/handoff';
import { ObjectStore } from '../src/kube/clusterView.ts';
import { runInformer } from '../src/kube/informer.ts';
import { scriptedKubeApi as scriptedApi, sendJson as json } from '../../../test/support/scriptedKubeApi.ts';
import { waitFor } from './testHelpers.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

const pod = (name: string, rv: string) => ({
  metadata: { name, namespace: 'default', resourceVersion: rv, managedFields: [{ manager: 'x' }] },
});

describe('informer', () => {
  it('lists every page, resumes the watch from the last bookmark, and on 410 re-lists with a diff (delete for what vanished, nothing for what is unchanged)', async (t) => {
    let watches = 0;
    let lists = 0;
    const { seen, client } = await scriptedApi(t, (req, res) => {
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
    const store = new ObjectStore<ReturnType<typeof pod>>();
    const events: string[] = [];
    store.onChange((type, o) => events.push(`${type} ${o.metadata.name}`));
    const informer = runInformer(client, {
      what: 'pod',
      path: '/api/v1/pods',
      fieldSelector: 'spec.nodeName=n1',
      store,
      logger,
      retryDelayMs: 5,
    });
    t.after(() => informer.stop());
    await informer.synced;
    assert.deepEqual(
      store.list().map((p) => p.metadata.name),
      ['a', 'b'],
      'both pages',
    );
    assert.equal(store.get('default', 'a')?.metadata.managedFields, undefined, 'managedFields dropped');
    await waitFor('d', () => store.get('default', 'd'));
    assert.deepEqual(events, ['add a', 'add b', 'update a', 'add c', 'delete b', 'add d']);
    const watchUrls = seen.filter((r) => r.url.searchParams.get('watch') === 'true').map((r) => r.url.searchParams);
    assert.equal(watchUrls[0]?.get('resourceVersion'), '10');
    assert.equal(watchUrls[1]?.get('resourceVersion'), '20', 'resumed from the bookmark');
    assert.equal(watchUrls[2]?.get('resourceVersion'), '30', 'watch from the new list');
    assert.equal(watchUrls[0]?.get('fieldSelector'), 'spec.nodeName=n1');
    assert.equal(watchUrls[0]?.get('allowWatchBookmarks'), 'true');
    assert.equal(seen[1]?.url.searchParams.get('continue'), 'page2');
  });

  it('retries a failing list with backoff and syncs once the API answers', async (t) => {
    let lists = 0;
    const { client } = await scriptedApi(
      t,
      (req, res) => {
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
    const line = (type: string, o: unknown) => JSON.stringify({ type, object: o }) + '\n';
    const waits: number[] = [];
    const { seen, client } = await scriptedApi(
      t,
      (req, res) => {
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
    const store = new ObjectStore<ReturnType<typeof pod>>();
    const events: string[] = [];
    store.onChange((type, o) => events.push(`${type} ${o.metadata.name}`));
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store, logger, retryDelayMs: 5 });
    t.after(() => informer.stop());
    await waitFor('d', () => store.get('default', 'd'));
    assert.deepEqual(events, ['add a', 'add b', 'add c', 'add d'], 'each object once, none lost');
    const watchRvs = seen.filter((r) => r.url.searchParams.get('watch') === 'true').map((r) => r.url.searchParams.get('resourceVersion'));
    assert.deepEqual(watchRvs, ['10', '11', '30'], 'resumed after the last whole event, then from the new list');
    assert.equal(lists, 3);
    assert.ok(
      waits.some((w) => w >= 1000),
      `Retry-After honoured: ${waits.join(',')}`,
    );
  });

  it('stopped while its list is in flight: opens no watch', async (t) => {
    const { seen, client } = await scriptedApi(t, (_req, res) => {
      setTimeout(() => json(res, 200, { metadata: { resourceVersion: '1' }, items: [] }), 50);
    });
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store: new ObjectStore<ReturnType<typeof pod>>(), logger });
    await waitFor('the list request', () => seen.length === 1 || undefined);
    informer.stop();
    await new Promise((r) => setTimeout(r, 150));
    assert.deepEqual(
      seen.map((r) => r.url.searchParams.get('watch')),
      [null],
      'only the list',
    );
  });
});
