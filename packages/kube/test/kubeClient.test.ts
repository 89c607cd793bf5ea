import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { KubeApiError, MERGE_PATCH, loadKubeConfig, readKubeconfigFile } from '../src/index.ts';
import { scriptedKubeApi as scriptedApi, sendJson as json } from '../../../test/support/scriptedKubeApi.ts';

async function tempDir(t: TestContext): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'kube-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

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
    writeFileSync(
      file,
      JSON.stringify({
        clusters: [{ name: 'c', cluster: { server: 'https://h' } }],
        users: [{ name: 'u', user: { exec: { command: 'x' } } }],
      }),
    );
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
    assert.deepEqual(await client.request({ method: 'PATCH', path: '/api/v1/nodes/n', contentType: MERGE_PATCH, body: { a: 1 } }), {
      ok: true,
    });
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
