import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { HANDOFF_PATH, createJsonLogger, postJson, type HandoffRequest } from '@istio-cni/handoff';
import { startHandoffServer, type HandoffHandler } from '../src/agent/handoffServer.ts';

const dir = mkdtempSync(join(tmpdir(), 'handoff-server-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

const request: HandoffRequest = {
  protocol: 1,
  command: 'ADD',
  cniVersion: '1.0.0',
  containerId: 'c1',
  netns: '/var/run/netns/x',
  ifName: 'eth0',
  pod: { name: 'p', namespace: 'default', uid: 'u', infraContainerId: 'c1' },
  ips: [],
};

let n = 0;
async function withServer(handler: HandoffHandler, fn: (socketPath: string) => Promise<void>): Promise<void> {
  const socketPath = join(dir, `s${n++}`, 'pluginevent.sock');
  const server = await startHandoffServer({ socketPath, handler, logger });
  try {
    await fn(socketPath);
  } finally {
    await server.close();
  }
}

describe('hand-off server', () => {
  it('creates a root-only socket (0600) and removes it on close', async () => {
    let path = '';
    await withServer(
      async () => ({ protocol: 1, verdict: 'ok' }),
      async (socketPath) => {
        path = socketPath;
        assert.equal(statSync(socketPath).mode & 0o777, 0o600);
      },
    );
    assert.throws(() => statSync(path), /ENOENT/);
  });

  it('disconnects a peer whose uid is not allowed before reading its request, and names it in the log', async () => {
    const own = process.geteuid?.() ?? 0;
    const lines: string[] = [];
    const socketPath = join(dir, 'peer', 'pluginevent.sock');
    let handled = 0;
    const server = await startHandoffServer({
      socketPath,
      handler: async () => {
        handled++;
        return { protocol: 1, verdict: 'ok' };
      },
      logger: createJsonLogger({ scope: 'test', threshold: 'debug', sink: (l) => lines.push(l) }),
      peerUids: new Set([own + 1]),
    });
    try {
      await assert.rejects(postJson(socketPath, HANDOFF_PATH, request, 2000), /ECONNRESET|socket hang up|EPIPE/);
      assert.equal(handled, 0, 'the handler never ran');
      const refusal = lines
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((e) => String(e.msg).startsWith('refused a hand-off'));
      assert.equal(refusal?.level, 'warn');
      assert.equal(refusal?.peer_uid, own);
      assert.equal(refusal?.peer_pid, process.pid);
    } finally {
      await server.close();
    }
  });

  it('replaces a stale socket file left by a crashed agent', async () => {
    const socketPath = join(dir, 'stale', 'pluginevent.sock');
    await startHandoffServer({ socketPath, handler: async () => ({ protocol: 1, verdict: 'ok' }), logger }).then((s) => s.close());
    writeFileSync(socketPath, 'stale');
    assert.ok(statSync(socketPath).isFile());
    const server = await startHandoffServer({ socketPath, handler: async () => ({ protocol: 1, verdict: 'ok' }), logger });
    try {
      // A socket where the regular file was (an inode number may be reused, so the type is what proves it).
      const replaced = statSync(socketPath);
      assert.ok(replaced.isSocket(), 'the stale file was replaced by a socket');
      assert.equal(replaced.mode & 0o777, 0o600);
      const res = await postJson(socketPath, HANDOFF_PATH, request, 2000);
      assert.equal(res.status, 200);
      assert.deepEqual(JSON.parse(res.body), { protocol: 1, verdict: 'ok' });
    } finally {
      await server.close();
    }
  });

  it('passes the parsed request to the handler and returns its verdict', async () => {
    let seen: HandoffRequest | undefined;
    await withServer(
      async (r) => {
        seen = r;
        return { protocol: 1, verdict: 'skipped', reason: 'no sidecar' };
      },
      async (socketPath) => {
        const res = await postJson(socketPath, HANDOFF_PATH, request, 2000);
        assert.equal(res.status, 200);
        assert.deepEqual(JSON.parse(res.body), { protocol: 1, verdict: 'skipped', reason: 'no sidecar' });
        assert.deepEqual(seen, request);
      },
    );
  });

  it('returns a handler CNI error with status 500', async () => {
    await withServer(
      async () => ({ error: { code: 11, msg: 'no ztunnel connection' } }),
      async (socketPath) => {
        const res = await postJson(socketPath, HANDOFF_PATH, request, 2000);
        assert.equal(res.status, 500);
        assert.deepEqual(JSON.parse(res.body), { protocol: 1, error: { code: 11, msg: 'no ztunnel connection' } });
      },
    );
  });

  it('turns a throwing handler into code 999 and keeps serving', async () => {
    let calls = 0;
    await withServer(
      async () => {
        calls++;
        if (calls === 1) throw new Error('boom');
        return { protocol: 1, verdict: 'ok' };
      },
      async (socketPath) => {
        const first = await postJson(socketPath, HANDOFF_PATH, request, 2000);
        assert.deepEqual(JSON.parse(first.body).error, { code: 999, msg: 'boom' });
        const second = await postJson(socketPath, HANDOFF_PATH, request, 2000);
        assert.equal(second.status, 200);
      },
    );
  });

  it('rejects malformed and unsupported requests without calling the handler', async () => {
    let calls = 0;
    await withServer(
      async () => {
        calls++;
        return { protocol: 1, verdict: 'ok' };
      },
      async (socketPath) => {
        const cases: [unknown, number, number, RegExp][] = [
          ['not an object', 400, 6, /JSON object/],
          [{ ...request, command: 'RUN' }, 400, 6, /unknown command/],
          [{ ...request, protocol: 99 }, 400, 1, /protocol 99 not supported/],
          [{ ...request, junk: 'x'.repeat(2 << 20) }, 413, 6, /exceeds/],
        ];
        for (const [body, status, code, msg] of cases) {
          const res = await postJson(socketPath, HANDOFF_PATH, body, 5000);
          assert.equal(res.status, status, res.body);
          const err = JSON.parse(res.body).error;
          assert.equal(err.code, code);
          assert.match(err.msg, msg);
        }
        const wrongPath = await postJson(socketPath, '/cmdadd', request, 2000);
        assert.equal(wrongPath.status, 404);
        assert.equal(calls, 0);
      },
    );
  });
});
