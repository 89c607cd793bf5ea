import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { createJsonLogger } from '@istio-cni/handoff';
import { ObjectStore } from '../src/kube/clusterView.ts';
import { runInformer } from '../src/kube/informer.ts';
import { KubeApiError, MERGE_PATCH, createKubeClient } from '../src/kube/kubeClient.ts';
import { loadKubeConfig, readKubeconfigFile } from '../src/kube/loadKubeConfig.ts';
import { tempDir, waitFor } from './testHelpers.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

interface Seen {
  method: string;
  url: URL;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A scripted API server: `handle` answers each request; every request is recorded. */
async function scriptedApi(t: TestContext, handle: (req: Seen, res: ServerResponse) => void) {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const r = { method: req.method ?? '', url: new URL(req.url ?? '/', 'http://x'), headers: req.headers, body };
      seen.push(r);
      handle(r, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const server_ = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  const client = createKubeClient({ server: server_, insecureSkipTlsVerify: false, token: () => 'tok', invalidateToken: () => {} });
  return { seen, client };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

const pod = (name: string, rv: string) => ({ metadata: { name, namespace: 'default', resourceVersion: rv, managedFields: [{ manager: 'x' }] } });

describe('kubeconfig', () => {
  it('uses the current context, a CA file relative to the kubeconfig, and a token file re-read after a 401', async (t) => {
    const dir = await tempDir(t);
    writeFileSync(join(dir, 'ca.pem'), 'CA');
    writeFileSync(join(dir, 'token'), 'first\n');
    writeFileSync(
      join(dir, 'config'),
      [
        'apiVersion: v1',
        'clusters:',
        '- {name: other, cluster: {server: "https://other:6443"}}',
        '- {name: mine, cluster: {server: "https://mine:6443", certificate-authority: ca.pem, tls-server-name: api.local}}',
        'users:',
        '- {name: u, user: {tokenFile: token}}',
        'contexts:',
        '- {name: c, context: {cluster: mine, user: u}}',
        'current-context: c',
      ].join('\n'),
    );
    const creds = readKubeconfigFile(join(dir, 'config'));
    assert.equal(creds.server.host, 'mine:6443');
    assert.equal(creds.ca?.toString(), 'CA');
    assert.equal(creds.tlsServerName, 'api.local');
    assert.equal(creds.token(), 'first');
    writeFileSync(join(dir, 'token'), 'second\n');
    assert.equal(creds.token(), 'first', 'cached between reads');
    creds.invalidateToken();
    assert.equal(creds.token(), 'second');
  });

  it('takes inline -data fields and refuses exec plugins by name', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'config');
    writeFileSync(
      file,
      JSON.stringify({
        clusters: [{ name: 'c', cluster: { server: 'https://h', 'certificate-authority-data': Buffer.from('PEM').toString('base64') } }],
        users: [{ name: 'u', user: { token: 'abc', 'client-certificate-data': Buffer.from('CERT').toString('base64') } }],
      }),
    );
    const creds = readKubeconfigFile(file);
    assert.equal(creds.ca?.toString(), 'PEM');
    assert.equal(creds.clientCert?.toString(), 'CERT');
    assert.equal(creds.token(), 'abc');
    writeFileSync(file, JSON.stringify({ clusters: [{ name: 'c', cluster: { server: 'https://h' } }], users: [{ name: 'u', user: { exec: { command: 'x' } } }] }));
    assert.throws(() => readKubeconfigFile(file), /user exec is not supported/);
  });

  it('in-cluster: the service host and port, the projected CA, the token file', async (t) => {
    const dir = await tempDir(t);
    writeFileSync(join(dir, 'ca.crt'), 'CA');
    writeFileSync(join(dir, 'token'), 'sa-token');
    const creds = loadKubeConfig({ serviceAccountDir: dir, serviceHost: 'fd00::1', servicePort: '443' });
    assert.equal(creds.server.href, 'https://[fd00::1]/');
    assert.equal(creds.ca?.toString(), 'CA');
    assert.equal(creds.token(), 'sa-token');
    assert.throws(() => loadKubeConfig({ serviceAccountDir: dir }), /KUBERNETES_SERVICE_HOST/);
  });
});

describe('kube client', () => {
  it('sends the bearer token and patch type; a Status answer becomes a KubeApiError with its code and message', async (t) => {
    const { seen, client } = await scriptedApi(t, (req, res) => {
      if (req.method === 'PATCH') json(res, 200, { ok: true });
      else json(res, 404, { kind: 'Status', message: 'pods "x" not found', reason: 'NotFound', code: 404 });
    });
    assert.deepEqual(await client.request({ method: 'PATCH', path: '/api/v1/nodes/n', contentType: MERGE_PATCH, body: { a: 1 } }), { ok: true });
    assert.equal(seen[0]?.headers.authorization, 'Bearer tok');
    assert.equal(seen[0]?.headers['content-type'], MERGE_PATCH);
    assert.equal(seen[0]?.body, '{"a":1}');
    await assert.rejects(client.request({ method: 'GET', path: '/api/v1/namespaces/d/pods/x' }), (err: unknown) => {
      assert.ok(err instanceof KubeApiError);
      assert.equal(err.code, 404);
      assert.equal(err.reason, 'NotFound');
      assert.match(err.message, /pods "x" not found/);
      return true;
    });
  });
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
        res.end(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } }) + '\n');
      } else {
        res.write(JSON.stringify({ type: 'ADDED', object: pod('d', '31') }) + '\n');
      }
    });
    const store = new ObjectStore<ReturnType<typeof pod>>();
    const events: string[] = [];
    store.onChange((type, o) => events.push(`${type} ${o.metadata.name}`));
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', fieldSelector: 'spec.nodeName=n1', store, logger, retryDelayMs: 5 });
    t.after(() => informer.stop());
    await informer.synced;
    assert.deepEqual(store.list().map((p) => p.metadata.name), ['a', 'b'], 'both pages');
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
    const { client } = await scriptedApi(t, (req, res) => {
      if (req.url.searchParams.get('watch') === 'true') {
        res.writeHead(200);
        return;
      }
      lists++;
      if (lists < 3) json(res, 500, { kind: 'Status', message: 'etcd unavailable', code: 500 });
      else json(res, 200, { metadata: { resourceVersion: '1' }, items: [pod('a', '1')] });
    });
    const warnings: string[] = [];
    const log = createJsonLogger({ scope: 'test', threshold: 'warn', sink: (l) => warnings.push((JSON.parse(l) as { error: string }).error) });
    const store = new ObjectStore<ReturnType<typeof pod>>();
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store, logger: log, retryDelayMs: 5 });
    t.after(() => informer.stop());
    await informer.synced;
    assert.equal(lists, 3);
    assert.equal(warnings.length, 2);
    assert.match(warnings[0] ?? '', /HTTP 500: etcd unavailable/);
  });

  it('stopped while its list is in flight: opens no watch', async (t) => {
    const { seen, client } = await scriptedApi(t, (_req, res) => {
      setTimeout(() => json(res, 200, { metadata: { resourceVersion: '1' }, items: [] }), 50);
    });
    const informer = runInformer(client, { what: 'pod', path: '/api/v1/pods', store: new ObjectStore<ReturnType<typeof pod>>(), logger });
    await waitFor('the list request', () => seen.length === 1 || undefined);
    informer.stop();
    await new Promise((r) => setTimeout(r, 150));
    assert.deepEqual(seen.map((r) => r.url.searchParams.get('watch')), [null], 'only the list');
  });
});
