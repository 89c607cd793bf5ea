import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Pod } from '@istio-cni/capture';
import { type Drift, PodNetnsRefusedError } from '@istio-cni/dataplane';
import { createPodVerifier, type CaptureInspector, type SandboxRelocator, type VerifiableAttachment } from '../src/agent/podVerifier.ts';
import {
  createVerificationLoop,
  type DriftAction,
  type VerificationClock,
  type VerificationTarget,
  type VerifyOutcome,
} from '../src/agent/verificationLoop.ts';
import { captureLogger } from './testHelpers.ts';

/** Time only moves when the loop sleeps; each sleep yields to the event loop once. */
function fakeClock(): VerificationClock & { sleeps: number[] } {
  let t = 1_000_000;
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => t,
    sleep: (ms) => {
      sleeps.push(ms);
      t += ms;
      return new Promise((r) => setImmediate(r));
    },
  };
}

function counter(): { inc(l: { kind: string; action: DriftAction }): void; counts: Map<string, number> } {
  const counts = new Map<string, number>();
  return { counts, inc: ({ kind, action }) => counts.set(`${kind}/${action}`, (counts.get(`${kind}/${action}`) ?? 0) + 1) };
}

const targets = (n: number): VerificationTarget[] => Array.from({ length: n }, (_, i) => ({ key: `c${i}/eth0`, pod: `default/p${i}` }));
const missing: Drift = { kind: 'rules_missing', detail: 'ipv4 nat ISTIO_OUTPUT: chain missing' };

describe('verification loop', () => {
  it('prepares before each pass and each verifyNow (targets it adds are checked in that pass); a failed preparation is logged, the pass goes on', async () => {
    const log = captureLogger();
    const keys: string[] = [];
    let prepared = 0;
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      prepare: async () => {
        prepared++;
        if (prepared === 2) throw new Error('procfs gone');
      },
      targets: () => targets(prepared),
      verify: async (t) => {
        keys.push(t.key);
        return { status: 'ok' };
      },
      logger: log.logger,
      drift: counter(),
    });
    await loop.verifyNow();
    assert.deepEqual(keys, ['c0/eth0']);
    await loop.verifyNow();
    assert.equal(keys.length, 3, 'the pass after a failed preparation still ran');
    assert.ok(log.lines.some((l) => l.level === 'error' && String(l.error).includes('procfs gone')));
  });

  it('spreads one pass over the interval: each pod in its own slot, a jittered start, then the next pass', async () => {
    const clock = fakeClock();
    const seen: { pod: string; at: number }[] = [];
    let randomCalls = 0;
    let done!: () => void;
    const twoPasses = new Promise<void>((r) => {
      done = r;
    });
    const loop = createVerificationLoop({
      intervalMs: 60_000,
      reportOnly: false,
      targets: () => targets(4),
      verify: async (t) => {
        seen.push({ pod: t.pod, at: clock.now() });
        if (seen.length === 8) done();
        return { status: 'ok' };
      },
      logger: captureLogger().logger,
      drift: counter(),
      clock,
      random: () => [0.5, 0.25, 0.75][randomCalls++ % 3] as number,
    });
    const origin = clock.now();
    loop.start();
    await twoPasses;
    await loop.stop();
    // First pass starts after 0.5 × interval of jitter; pod i at (i + r) × 15 s into the pass.
    const firstPass = origin + 30_000;
    assert.deepEqual(
      seen.slice(0, 4).map((s) => s.at - firstPass),
      [0.25 * 15_000, (1 + 0.75) * 15_000, (2 + 0.5) * 15_000, (3 + 0.25) * 15_000],
    );
    for (let i = 0; i < 4; i++) {
      const at = (seen[i]?.at ?? 0) - firstPass;
      assert.ok(at >= i * 15_000 && at < (i + 1) * 15_000, `pod ${i} verified inside its slot`);
    }
    // The second pass starts one interval after the first.
    assert.ok((seen[4]?.at ?? 0) >= firstPass + 60_000 && (seen[4]?.at ?? 0) < firstPass + 75_000);
    assert.deepEqual(
      seen.slice(4).map((s) => s.pod),
      ['default/p0', 'default/p1', 'default/p2', 'default/p3'],
    );
  });

  it('node state (scope node) is logged as state, not as a pod', async () => {
    const { logger, lines } = captureLogger();
    const drift = counter();
    let repaired = false;
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      targets: () => [{ key: 'ambient/node/host-probe-rules', pod: 'host probe rules', scope: 'node' }],
      verify: async (): Promise<VerifyOutcome> =>
        repaired
          ? { status: 'ok' }
          : {
              status: 'drift',
              drift: [{ kind: 'host_rules', detail: 'ipv4 nat: missing chain ISTIO_POSTRT' }],
              repair: async () => {
                repaired = true;
              },
            },
      logger,
      drift,
    });
    const [result] = await loop.verifyNow();
    assert.equal(result?.action, 'repaired');
    assert.deepEqual([...drift.counts], [['host_rules/repaired', 1]]);
    const logged = lines.filter((l) => l.msg === 'node state drifted from its plan');
    assert.equal(logged.length, 1, JSON.stringify(lines));
    assert.equal(logged[0]?.state, 'host probe rules');
    assert.equal(logged[0]?.pod, undefined);
  });

  it('repairs drift once, checks again, counts per kind and logs one line naming the pod', async () => {
    const { logger, lines } = captureLogger();
    const drift = counter();
    let repaired = 0;
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      targets: () => targets(1),
      verify: async (): Promise<VerifyOutcome> =>
        repaired === 0
          ? {
              status: 'drift',
              drift: [missing, { kind: 'rules_missing', detail: 'ipv6 too' }],
              repair: async () => {
                repaired++;
              },
            }
          : { status: 'ok' },
      logger,
      drift,
    });
    const [result] = await loop.verifyNow();
    assert.equal(repaired, 1);
    assert.equal(result?.action, 'repaired');
    assert.deepEqual([...drift.counts], [['rules_missing/repaired', 1]]);
    const logged = lines.filter((l) => l.msg === 'pod drifted from its plan');
    assert.equal(logged.length, 1);
    assert.equal(logged[0]?.pod, 'default/p0');
    assert.equal(logged[0]?.action, 'repaired');
    assert.deepEqual((logged[0]?.drift as Drift[] | undefined)?.[0], missing);
    assert.equal(loop.results().get('c0/eth0')?.status, 'drift');
  });

  it('a repair that does not hold is failed, with the remaining difference', async () => {
    const drift = counter();
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      targets: () => targets(1),
      verify: async () => ({ status: 'drift', drift: [missing], repair: async () => undefined }),
      logger: captureLogger().logger,
      drift,
    });
    const [result] = await loop.verifyNow();
    assert.equal(result?.action, 'failed');
    assert.match(result?.error ?? '', /still differs after repair: ipv4 nat ISTIO_OUTPUT: chain missing/);
    assert.deepEqual([...drift.counts], [['rules_missing/failed', 1]]);
  });

  it('report-only repairs nothing and counts reported', async () => {
    const drift = counter();
    let repaired = 0;
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: true,
      targets: () => targets(2),
      verify: async () => ({
        status: 'drift',
        drift: [missing],
        repair: async () => {
          repaired++;
        },
      }),
      logger: captureLogger().logger,
      drift,
    });
    const results = await loop.verifyNow();
    assert.equal(repaired, 0);
    assert.deepEqual(
      results.map((r) => r.action),
      ['reported', 'reported'],
    );
    assert.deepEqual([...drift.counts], [['rules_missing/reported', 2]]);
  });

  it('an unverifiable pod (or a throwing check) is reported as such, never repaired', async () => {
    const { logger, lines } = captureLogger();
    const drift = counter();
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      targets: () => targets(2),
      verify: async (t) => {
        if (t.pod === 'default/p0') return { status: 'unverifiable', error: 'permission denied' };
        throw new Error('nsenter failed');
      },
      logger,
      drift,
    });
    const results = await loop.verifyNow();
    assert.deepEqual(
      results.map((r) => [r.status, r.error]),
      [
        ['unverifiable', 'permission denied'],
        ['unverifiable', 'nsenter failed'],
      ],
    );
    assert.deepEqual([...drift.counts], [['unverifiable/reported', 2]]);
    assert.equal(lines.filter((l) => l.msg === 'pod could not be verified').length, 2);
  });

  it('verifies one pod on demand, and forgets results of pods no longer tracked', async () => {
    let tracked = targets(3);
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: false,
      targets: () => tracked,
      verify: async () => ({ status: 'ok' }),
      logger: captureLogger().logger,
      drift: counter(),
    });
    const one = await loop.verifyNow((t) => t.pod === 'default/p1');
    assert.deepEqual(
      one.map((r) => r.pod),
      ['default/p1'],
    );
    await loop.verifyNow();
    assert.equal(loop.results().size, 3);
    tracked = targets(1);
    await loop.verifyNow();
    assert.deepEqual([...loop.results().keys()], ['c0/eth0']);
  });
});

describe('pod verifier', () => {
  const sidecar = (over: Partial<Pod['metadata']> = {}): Pod => ({
    metadata: {
      name: 'web',
      namespace: 'default',
      uid: 'uid-web',
      annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' },
      ...over,
    },
    spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }] },
    status: { podIP: '10.0.0.5' },
  });
  const attachment: VerifiableAttachment = {
    namespace: 'default',
    name: 'web',
    uid: 'uid-web',
    netns: '/var/run/netns/web',
    mode: 'sidecar',
  };

  function verifier(
    pod: Pod | undefined,
    capture: Partial<CaptureInspector> = {},
    inodes: Record<string, number> = {},
    relocate?: SandboxRelocator,
  ) {
    const calls: string[] = [];
    const inspector: CaptureInspector = {
      inspect: async (p, netns, ips) => {
        calls.push(`inspect ${p === undefined ? 'outside' : p.metadata.name} ${netns} ${ips?.join(',')}`);
        return [missing];
      },
      repair: async (p, netns) => {
        calls.push(`repair ${p.metadata.name} ${netns}`);
        return 'ipv4:reconciled';
      },
      addresses: async (netns) => {
        calls.push(`addresses ${netns}`);
        return ['127.0.0.1', '10.0.0.5', 'fd00::5'];
      },
      ...capture,
    };
    const verify = createPodVerifier({
      view: { getPod: () => pod, getNamespace: () => undefined },
      capture: inspector,
      policy: { agentNamespace: 'istio-system', excludeNamespaces: [] },
      ambient: { enabled: false, selectors: [] },
      netnsInode: (netns) => inodes[netns],
      ...(relocate === undefined ? {} : { relocate }),
    });
    return { verify, calls };
  }

  it('a drifted sidecar pod is inspected with its status IPs and repaired in its netns', async () => {
    const { verify, calls } = verifier(sidecar());
    const out = await verify(attachment);
    assert.equal(out.status, 'drift');
    assert.ok(out.status === 'drift' && out.repair !== undefined);
    await out.repair();
    assert.deepEqual(calls, ['inspect web /var/run/netns/web 10.0.0.5', 'addresses /var/run/netns/web', 'repair web /var/run/netns/web']);
  });

  it('a netns path that now names another netns (inode changed since ADD) is never inspected or repaired', async () => {
    const { verify, calls } = verifier(sidecar(), {}, { '/var/run/netns/web': 4026532999 });
    const out = await verify({ ...attachment, netnsInode: 4026532100 });
    assert.equal(out.status, 'drift');
    assert.ok(out.status === 'drift' && out.repair === undefined, 'reported only');
    assert.deepEqual(
      out.drift.map((d) => d.kind),
      ['netns_replaced'],
    );
    assert.match(out.drift[0]?.detail ?? '', /no longer the network namespace the pod was added with \(inode 4026532999, was 4026532100\)/);
    assert.deepEqual(calls, []);
    const same = verifier(sidecar(), {}, { '/var/run/netns/web': 4026532100 });
    assert.equal((await same.verify({ ...attachment, netnsInode: 4026532100 })).status, 'drift');
    const gone = verifier(sidecar(), {}, {});
    assert.deepEqual(await gone.verify({ ...attachment, netnsInode: 4026532100 }), {
      status: 'skipped',
      reason: 'network namespace is gone',
    });
  });

  it('a sandbox re-created with no ADD is found where the pod runs and captured there; the attachment follows it', async () => {
    const asked: string[] = [];
    const moves: string[] = [];
    const relocate: SandboxRelocator = {
      locate: async (uid, ips) => {
        asked.push(`${uid} ${ips.join(',')}`);
        return { netns: '/host/proc/4242/ns/net', inode: 4026533000 };
      },
      moved: (a, to) => moves.push(`${a.netns} -> ${to.netns} ${to.inode}`),
    };
    for (const inodes of [{}, { '/var/run/netns/web': 4026532999 }]) {
      asked.length = 0;
      moves.length = 0;
      const { verify, calls } = verifier(sidecar(), {}, inodes, relocate);
      const out = await verify({ ...attachment, netnsInode: 4026532100 });
      assert.ok(out.status === 'drift' && out.repair !== undefined);
      assert.deepEqual(
        out.drift.map((d) => d.kind),
        ['netns_replaced'],
      );
      assert.match(out.drift[0]?.detail ?? '', /runs in inode 4026533000 \(\/host\/proc\/4242\/ns\/net\)/);
      assert.deepEqual(asked, ['uid-web 10.0.0.5']);
      assert.deepEqual(calls, [], 'the netns at the saved path is never entered');
      await out.repair();
      assert.deepEqual(calls, ['repair web /host/proc/4242/ns/net']);
      assert.deepEqual(moves, ['/var/run/netns/web -> /host/proc/4242/ns/net 4026533000']);
    }
  });

  it('the saved netns still there while the pod runs in another one carrying its address: captured there, the old one never entered', async () => {
    const moves: string[] = [];
    const relocate: SandboxRelocator = {
      locate: async () => ({ netns: '/host/proc/4242/ns/net', inode: 4026533000 }),
      moved: (a, to) => moves.push(`${a.netns} -> ${to.netns}`),
    };
    const { verify, calls } = verifier(sidecar(), {}, { '/var/run/netns/web': 4026532100 }, relocate);
    const out = await verify({ ...attachment, netnsInode: 4026532100 });
    assert.ok(out.status === 'drift' && out.repair !== undefined);
    assert.deepEqual(
      out.drift.map((d) => d.kind),
      ['netns_replaced'],
    );
    assert.match(out.drift[0]?.detail ?? '', /still names inode 4026532100, where the pod no longer runs/);
    assert.deepEqual(calls, []);
    await out.repair();
    assert.deepEqual(calls, ['repair web /host/proc/4242/ns/net']);
    assert.deepEqual(moves, ['/var/run/netns/web -> /host/proc/4242/ns/net']);
    // The pod runs where its attachment says (the search finds nothing else): inspected as always.
    const here = verifier(
      sidecar(),
      {},
      { '/var/run/netns/web': 4026532100 },
      { locate: async () => undefined, moved: () => assert.fail() },
    );
    assert.equal((await here.verify({ ...attachment, netnsInode: 4026532100 })).status, 'drift');
    assert.deepEqual(here.calls, ['inspect web /var/run/netns/web 10.0.0.5']);
    // A search that fails (no readable procfs) leaves the saved netns verified as before.
    const failing: SandboxRelocator = { locate: async () => Promise.reject(new Error('ENOENT: /host/proc')), moved: () => assert.fail() };
    const blind = verifier(sidecar(), {}, { '/var/run/netns/web': 4026532100 }, failing);
    assert.equal((await blind.verify({ ...attachment, netnsInode: 4026532100 })).status, 'drift');
    assert.deepEqual(blind.calls, ['inspect web /var/run/netns/web 10.0.0.5']);
  });

  it('a sandbox not found elsewhere keeps the old answers; a failed search is unverifiable; other modes never search', async () => {
    const nowhere: SandboxRelocator = { locate: async () => undefined, moved: () => assert.fail('nothing moved') };
    const gone = verifier(sidecar(), {}, {}, nowhere);
    assert.deepEqual(await gone.verify({ ...attachment, netnsInode: 1 }), { status: 'skipped', reason: 'network namespace is gone' });
    const failing: SandboxRelocator = {
      locate: async () => {
        throw new Error('EACCES: /host/proc');
      },
      moved: () => assert.fail('nothing moved'),
    };
    assert.deepEqual(await verifier(sidecar(), {}, {}, failing).verify({ ...attachment, netnsInode: 1 }), {
      status: 'unverifiable',
      error: "locating the pod's sandbox: EACCES: /host/proc",
    });
    const plain = { ...sidecar(), metadata: { name: 'web', namespace: 'default', uid: 'uid-web' } };
    const none = verifier(plain, {}, {}, failing);
    assert.deepEqual(await none.verify({ ...attachment, mode: 'none', netnsInode: 1 }), {
      status: 'skipped',
      reason: 'network namespace is gone',
    });
  });

  it("a drifted netns that holds none of the pod's addresses is not repaired", async () => {
    const { verify, calls } = verifier(sidecar(), { addresses: async () => ['10.0.0.77'] });
    const out = await verify(attachment);
    assert.ok(out.status === 'drift' && out.repair !== undefined);
    await assert.rejects(out.repair(), /holds none of the pod's addresses \(10\.0\.0\.5; found 10\.0\.0\.77\): not repaired/);
    assert.deepEqual(calls, ['inspect web /var/run/netns/web 10.0.0.5']);
  });

  it('without status IPs yet, the IPs of the CNI result at ADD decide the IP family', async () => {
    const { verify, calls } = verifier({ ...sidecar(), status: {} });
    await verify({ ...attachment, ips: ['10.0.0.9/24'] });
    assert.deepEqual(calls, ['inspect web /var/run/netns/web 10.0.0.9/24']);
  });

  it('a pod mid-deletion, replaced, gone or whose decision changed is skipped without inspecting', async () => {
    const cases: [Pod | undefined, RegExp][] = [
      [sidecar({ deletionTimestamp: '2026-12-01T00:00:00Z' }), /being deleted/],
      [sidecar({ uid: 'uid-other' }), /replaced/],
      [undefined, /no longer in the cache/],
      [sidecar({ annotations: {} }), /decision changed from sidecar to none/],
    ];
    for (const [pod, reason] of cases) {
      const { verify, calls } = verifier(pod);
      const out = await verify(attachment);
      assert.equal(out.status, 'skipped');
      assert.match(out.status === 'skipped' ? out.reason : '', reason);
      assert.deepEqual(calls, []);
    }
  });

  it('a netns that is gone is skipped; one that cannot be read is unverifiable', async () => {
    const gone = new PodNetnsRefusedError('/var/run/netns/web', 'it cannot be opened', {
      cause: Object.assign(new Error('ENOENT'), { code: 'ENOENT' }),
    });
    const a = verifier(sidecar(), {
      inspect: async () => {
        throw gone;
      },
    });
    assert.deepEqual(await a.verify(attachment), { status: 'skipped', reason: 'network namespace is gone' });
    const b = verifier(sidecar(), {
      inspect: async () => {
        throw new Error('iptables-save: permission denied');
      },
    });
    assert.deepEqual(await b.verify(attachment), { status: 'unverifiable', error: 'iptables-save: permission denied' });
  });

  it('a pod outside the mesh is inspected for foreign Istio state, which is only reported', async () => {
    const plain: Pod = { metadata: { name: 'web', namespace: 'default', uid: 'uid-web' }, spec: { containers: [{ name: 'app' }] } };
    const unexpected: Drift = { kind: 'unexpected_rules', detail: 'ISTIO_* iptables state in ipv4' };
    const { verify, calls } = verifier(plain, {
      inspect: async (p) => {
        calls.push(`inspect ${p === undefined ? 'outside' : 'pod'}`);
        return [unexpected];
      },
    });
    const out = await verify({ ...attachment, mode: 'none' });
    assert.deepEqual(out, { status: 'drift', drift: [unexpected] });
    assert.deepEqual(calls, ['inspect outside']);
  });
});

describe('verification loop, drift left in place', () => {
  it('is logged and counted once while it stays the same, again when it changes', async () => {
    const { logger, lines } = captureLogger();
    const drift = counter();
    let detail = 'a';
    const loop = createVerificationLoop({
      intervalMs: 0,
      reportOnly: true,
      targets: () => targets(1),
      verify: async () => ({ status: 'drift', drift: [{ kind: 'rules_changed', detail }] }),
      logger,
      drift,
    });
    await loop.verifyNow();
    await loop.verifyNow();
    detail = 'b';
    await loop.verifyNow();
    assert.deepEqual([...drift.counts], [['rules_changed/reported', 2]]);
    assert.equal(lines.filter((l) => l.msg === 'pod drifted from its plan').length, 2);
  });
});
