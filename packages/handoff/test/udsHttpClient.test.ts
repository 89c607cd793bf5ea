import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { UdsConnectError, UdsTimeoutError, parseHttpResponse, postJson } from '@istio-cni/handoff';

const dir = mkdtempSync(join(tmpdir(), 'uds-client-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function listen(server: Server | ReturnType<typeof createNetServer>, path: string): Promise<void> {
  return new Promise((resolve) => server.listen(path, () => resolve()));
}

describe('postJson', () => {
  it('posts JSON and returns the status and body of a node:http server', async (t) => {
    const path = join(dir, 'ok.sock');
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const echoed = JSON.stringify({ method: req.method, url: req.url, got: JSON.parse(Buffer.concat(chunks).toString()) });
        res.writeHead(201, { 'Content-Length': Buffer.byteLength(echoed) });
        res.end(echoed);
      });
    });
    await listen(server, path);
    t.after(() => server.close());
    const res = await postJson(path, '/v1/cni', { hello: 'wörld' }, 2000);
    assert.equal(res.status, 201);
    assert.deepEqual(JSON.parse(res.body), { method: 'POST', url: '/v1/cni', got: { hello: 'wörld' } });
  });

  it('reports a missing socket as a connect error', async () => {
    await assert.rejects(postJson(join(dir, 'absent.sock'), '/', {}, 1000), (err: unknown) => {
      return err instanceof UdsConnectError && err.errno === 'ENOENT';
    });
  });

  it('times out when the peer never answers', async (t) => {
    const path = join(dir, 'silent.sock');
    const server = createNetServer(() => {});
    await listen(server, path);
    t.after(() => server.close());
    await assert.rejects(postJson(path, '/', {}, 100), UdsTimeoutError);
  });
});

describe('parseHttpResponse', () => {
  it('honours Content-Length', () => {
    const r = parseHttpResponse(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing'));
    assert.deepEqual(r, { status: 200, body: '{}' });
  });
  it('reads to EOF without Content-Length', () => {
    assert.deepEqual(parseHttpResponse(Buffer.from('HTTP/1.0 500 X\r\n\r\nboom')), { status: 500, body: 'boom' });
  });
  it('rejects a truncated body', () => {
    assert.throws(() => parseHttpResponse(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}')), /truncated/);
  });
  it('rejects chunked encoding', () => {
    assert.throws(() => parseHttpResponse(Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n')), /transfer-encoding/);
  });
  it('rejects garbage', () => {
    assert.throws(() => parseHttpResponse(Buffer.from('SSH-2.0-x\r\n\r\n')), /status line/);
    assert.throws(() => parseHttpResponse(Buffer.from('HTTP/1.1 200')), /header terminator/);
  });
});
