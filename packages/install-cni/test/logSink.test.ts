import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { processLogBatch, reencodePluginLine, startLogSinkServer } from '../src/logSink/logSinkServer.ts';
import { tempDir } from './testHelpers.ts';

function post(socketPath: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/log', method: 'POST' }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('plugin log sink', () => {
  it('re-emits plugin lines under cni-plugin with the original time and fields', () => {
    const r = reencodePluginLine(
      JSON.stringify({ level: 'info', time: '2026-01-02T03:04:05.123456789Z', msg: ' added pod \n', pod: 'ns/p', scope: 'x' }),
    );
    assert.deepEqual(JSON.parse(r!.line), {
      level: 'info',
      time: '2026-01-02T03:04:05.123456789Z',
      scope: 'cni-plugin',
      msg: 'added pod',
      pod: 'ns/p',
    });
    assert.equal(reencodePluginLine('{"level":"fatal","msg":"x"}'), undefined);
    assert.equal(reencodePluginLine('not json'), undefined);
  });

  it('drops malformed entries and lines below the plugin scope level, keeps a batch together', () => {
    const lines: string[] = [];
    const n = processLogBatch(
      JSON.stringify(['{"level":"debug","msg":"d"}', 'garbage', 42, '{"level":"warn","msg":"w"}', '{"level":"error","msg":"e"}']),
      { sink: (l) => lines.push(l), threshold: () => 'info' },
    );
    assert.equal(n, 2);
    assert.deepEqual(
      lines.map((l) => (JSON.parse(l) as { msg: string }).msg),
      ['w', 'e'],
    );
    assert.equal(processLogBatch('{"not":"an array"}', { sink: () => assert.fail(), threshold: () => 'debug' }), 0);
  });

  it('serves POST /log on a 0600 unix socket and always answers 200', async (t) => {
    const dir = await tempDir(t);
    const socketPath = join(dir, 'log.sock');
    const lines: string[] = [];
    const server = await startLogSinkServer({ socketPath, sink: (l) => lines.push(l), threshold: () => 'debug' });
    t.after(() => server.close());
    assert.equal((await stat(socketPath)).mode & 0o777, 0o600);
    assert.equal(await post(socketPath, JSON.stringify(['{"level":"info","time":"t1","msg":"hello","if":"eth0"}'])), 200);
    assert.equal(await post(socketPath, 'not json'), 200);
    assert.deepEqual(JSON.parse(lines[0]!), { level: 'info', time: 't1', scope: 'cni-plugin', msg: 'hello', if: 'eth0' });
  });
});
