import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it, type TestContext } from 'node:test';
import {
  Backoff,
  IDLE_SOCKET_MS,
  KubeApiError,
  KubeConnectionError,
  MERGE_PATCH,
  backoffDelay,
  createKubeClient,
  isTransientKubeError,
  parseRetryAfter,
  retryWithBackoff,
} from '../src/index.ts';
import { scriptedKubeApi as scriptedApi, sendJson as json } from '../../../test/support/scriptedKubeApi.ts';
import { startFaultProxy } from '../../../test/support/faultProxy.ts';

const status = (code: number, reason: string) => ({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message: reason });

/** Records the waits instead of sleeping. */
function recordedSleep(): { waits: number[]; sleep(ms: number): Promise<void> } {
  const waits: number[] = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

describe('backoff', () => {
  it('grows by the factor up to the ceiling, with jitter only upwards and within the ceiling', () => {
    const policy = { initialMs: 100, maxMs: 1000 };
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6].map((n) => backoffDelay(policy, n, () => 0)),
      [100, 200, 400, 800, 1000, 1000],
    );
    assert.equal(
      backoffDelay(policy, 1, () => 0.999),
      120,
    );
    assert.equal(
      backoffDelay(policy, 10, () => 0.999),
      1000,
    );
    const b = new Backoff({ initialMs: 10, maxMs: 40, jitter: 0 });
    assert.deepEqual([b.next(), b.next(), b.next(), b.next()], [10, 20, 40, 40]);
    b.reset();
    assert.equal(b.next(), 10);
  });

  it('retries what classify allows, honours a longer server wait, and stops at the attempts or the deadline', async () => {
    const { waits, sleep } = recordedSleep();
    let calls = 0;
    const value = await retryWithBackoff(
      async () => {
        if (++calls < 3) throw new Error('flaky');
        return 'ok';
      },
      {
        policy: { initialMs: 10, maxMs: 100, jitter: 0 },
        maxAttempts: 5,
        classify: (_e, n) => ({ retry: true, ...(n === 2 ? { afterMs: 1000 } : {}) }),
        sleep,
      },
    );
    assert.equal(value, 'ok');
    assert.deepEqual(waits, [10, 1000]);

    let clock = 0;
    calls = 0;
    await assert.rejects(
      retryWithBackoff(
        async () => {
          calls++;
          throw new Error('down');
        },
        {
          policy: { initialMs: 400, maxMs: 400, jitter: 0 },
          maxAttempts: 100,
          deadlineMs: 1000,
          classify: () => ({ retry: true }),
          now: () => clock,
          sleep: async (ms) => {
            clock += ms;
          },
        },
      ),
      /down/,
    );
    assert.equal(calls, 3, 'attempts at 0, 400 and 800 ms; a fourth could not start before 1000 ms');
    calls = 0;
    await assert.rejects(
      retryWithBackoff(
        async () => {
          calls++;
          throw new Error('final');
        },
        { policy: { initialMs: 1, maxMs: 1 }, maxAttempts: 5, classify: () => ({ retry: false }), sleep },
      ),
    );
    assert.equal(calls, 1);
  });

  it('reads Retry-After as seconds or an HTTP date', () => {
    assert.equal(parseRetryAfter('1'), 1000);
    assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6_000);
    assert.equal(parseRetryAfter('soon'), undefined);
    assert.equal(parseRetryAfter(undefined), undefined);
  });
});

describe('kube client retries', () => {
  it('retries GETs on 429 (waiting Retry-After), 500, 502, 503, 504, then succeeds', async (t) => {
    const answers = [429, 500, 502, 503, 504];
    const { waits, sleep } = recordedSleep();
    const { seen, client } = await scriptedApi(
      t,
      (_req, res) => {
        const code = answers.shift();
        if (code === undefined) return json(res, 200, { kind: 'Pod' });
        if (code === 429) res.setHeader('Retry-After', '1');
        json(res, code, status(code, 'Transient'));
      },
      { sleep, maxAttempts: 6 },
    );
    assert.deepEqual(await client.request({ method: 'GET', path: '/api/v1/namespaces/a/pods/p' }), { kind: 'Pod' });
    assert.equal(seen.length, 6);
    assert.equal(waits.length, 5);
    assert.ok((waits[0] ?? 0) >= 1000, `Retry-After honoured: ${waits.join(',')}`);
    assert.ok(
      waits.slice(1).every((w) => w > 0 && w <= 3000),
      waits.join(','),
    );
  });

  it('reports 400, 401, 403, 404, 409 and 422 as they are, after one attempt', async (t) => {
    for (const code of [400, 401, 403, 404, 409, 422]) {
      const { seen, client } = await scriptedApi(t, (_req, res) => json(res, code, status(code, `R${code}`)), { sleep: async () => {} });
      const err = await client
        .request({ method: 'PATCH', path: '/x', idempotent: true, contentType: MERGE_PATCH, body: {} })
        .catch((e: unknown) => e);
      assert.ok(err instanceof KubeApiError && err.code === code && err.reason === `R${code}`, String(err));
      assert.equal(isTransientKubeError(err), false);
      assert.equal(seen.length, 1, `${code} not retried`);
    }
  });

  it('does not resend a non-idempotent call after a transient answer; gives up within the deadline naming the call', async (t) => {
    const { seen, client } = await scriptedApi(t, (_req, res) => json(res, 503, status(503, 'ServiceUnavailable')), {
      deadlineMs: 600,
      backoff: { initialMs: 100, maxMs: 100 },
    });
    await assert.rejects(
      client.request({ method: 'POST', path: '/api/v1/namespaces/a/events', body: {} }),
      /POST \/api\/v1\/namespaces\/a\/events: HTTP 503/,
    );
    assert.equal(seen.length, 1);
    const err = await client.request({ method: 'GET', path: '/api/v1/nodes/n' }).catch((e: unknown) => e);
    assert.ok(err instanceof KubeApiError && err.code === 503 && isTransientKubeError(err));
    // Waits of at least 100 ms each: no attempt starts after the 600 ms deadline, however slow the machine.
    const gets = seen.length - 1;
    assert.ok(gets > 1 && gets <= 6, `GET attempts: ${gets}`);
  });

  it('names the call on a connection failure and retries it for idempotent calls', async (t) => {
    const server: Server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    await new Promise<void>((r) => server.close(() => r()));
    const { waits, sleep } = recordedSleep();
    const client = createKubeClient(
      { server: new URL(`http://127.0.0.1:${port}`), insecureSkipTlsVerify: false, token: () => undefined, invalidateToken: () => {} },
      { sleep, maxAttempts: 3 },
    );
    const err = await client.request({ method: 'GET', path: '/api/v1/nodes/n' }).catch((e: unknown) => e);
    assert.ok(err instanceof KubeConnectionError, String(err));
    assert.match(err.message, /^GET \/api\/v1\/nodes\/n: .*ECONNREFUSED/);
    assert.equal(waits.length, 2);
    t.after(() => server.close());
  });
});

describe('kube client keep-alive connections', () => {
  async function apiAndProxy(t: TestContext) {
    const { seen, url } = await scriptedApi(t, (req, res) => json(res, 200, { method: req.method, n: seen.length }));
    const proxy = await startFaultProxy(url.href);
    t.after(() => proxy.close());
    const client = createKubeClient(
      { server: new URL(proxy.url), insecureSkipTlsVerify: false, token: () => 't', invalidateToken: () => {} },
      { sleep: async () => {} },
    );
    return { seen, proxy, client };
  }

  it('sends again on a new connection what failed on a reused one closed by the server, POST included', async (t) => {
    const { seen, proxy, client } = await apiAndProxy(t);
    await client.request({ method: 'GET', path: '/a' });
    proxy.closeIdleOnReuse(true);
    for (const method of ['GET', 'POST', 'PATCH'] as const) {
      await client.request({ method, path: '/b', body: method === 'GET' ? undefined : {} });
    }
    assert.equal(seen.length, 4, 'each call reached the server once');
    assert.ok(proxy.counts.closedOnReuse >= 3, JSON.stringify(proxy.counts));
  });

  it('closes idle pooled sockets itself, before usual server idle limits', async (t) => {
    const { proxy, client } = await apiAndProxy(t);
    const before = proxy.counts.requests;
    await client.request({ method: 'GET', path: '/a' });
    assert.equal(proxy.counts.requests, before + 1);
    // Reuse within the idle window hits the same connection; after it, a new one.
    proxy.closeIdleOnReuse(true);
    await new Promise((r) => setTimeout(r, IDLE_SOCKET_MS + 500));
    await client.request({ method: 'GET', path: '/b' });
    assert.equal(proxy.counts.closedOnReuse, 0, 'the idle socket was closed by the client, not found dead on reuse');
    assert.ok(IDLE_SOCKET_MS < 5000);
  });

  it('rides out resets, 429s and 503s for idempotent calls', async (t) => {
    const { seen, proxy, client } = await apiAndProxy(t);
    proxy.setRates({ reset: 0.1, resetAfterForward: 0.05, unavailable: 0.1 });
    for (let i = 0; i < 100; i++) {
      await client.request({ method: 'PATCH', path: `/p${i}`, idempotent: true, contentType: MERGE_PATCH, body: {} });
    }
    const c = proxy.counts;
    assert.ok(c.reset + c.resetAfterForward + c.unavailable > 10, JSON.stringify(c));
    assert.equal(new Set(seen.map((s) => s.url.pathname)).size, 100);
  });
});
