import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeApiError, type KubeClient, type KubeRequest } from '@istio-cni/kube';
import { createDaemonSetLookup } from '../src/kube/daemonSetLookup.ts';
import { shouldKeepOnShutdown, type DaemonSetLookup, type DaemonSetState } from '../src/installer/upgradeSafety.ts';

function lookup(...answers: (DaemonSetState | Error)[]): DaemonSetLookup & { calls: number } {
  const l = {
    calls: 0,
    async lookup(): Promise<DaemonSetState> {
      const a = answers[Math.min(l.calls++, answers.length - 1)]!;
      if (a instanceof Error) throw a;
      return a;
    },
  };
  return l;
}

/** A Kubernetes API that answers the DaemonSet GET with `ds` (or throws it) and the Node GET with `labels`. */
function api(ds: object | Error, labels: Record<string, string> = {}): KubeClient & { paths: string[] } {
  const paths: string[] = [];
  return {
    paths,
    async request<T>(req: KubeRequest): Promise<T> {
      paths.push(req.path);
      if (req.path === '/apis/apps/v1/namespaces/istio-system/daemonsets/istio-cni-node') {
        if (ds instanceof Error) throw ds;
        return ds as T;
      }
      if (req.path === '/api/v1/nodes/node-1') return { metadata: { labels } } as T;
      throw new KubeApiError(`unexpected ${req.method} ${req.path}`, 404);
    },
    watch() {
      throw new Error('no watch in this test');
    },
  };
}

const onlyOn = (pool: string) => ({
  spec: {
    template: {
      spec: {
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'pool', operator: 'In', values: [pool] }] }],
            },
          },
        },
      },
    },
  },
});

function realLookup(client: KubeClient): DaemonSetLookup & { calls: number } {
  const inner = createDaemonSetLookup(client, 'istio-system', async () => {
    const node = await client.request<{ metadata: { labels: Record<string, string> } }>({ method: 'GET', path: '/api/v1/nodes/node-1' });
    return node.metadata.labels;
  });
  const l = {
    calls: 0,
    lookup: () => {
      l.calls++;
      return inner.lookup();
    },
  };
  return l;
}

const sidecar = { ambientEnabled: false, disableSafeUpgrade: false, ownedConfig: false, retryDelayMs: 1 };
const ambient = { ...sidecar, ambientEnabled: true };
const modes = [
  ['sidecar', sidecar],
  ['ambient', ambient],
] as const;

describe('upgrade-safe shutdown decision (upstream ShouldStopCleanup), sidecar and ambient', () => {
  for (const [mode, base] of modes) {
    it(`${mode}: keeps everything while the DaemonSet exists and targets this node (no affinity, or affinity matching)`, async () => {
      assert.equal(await shouldKeepOnShutdown({ ...base, lookup: realLookup(api({ spec: {} })) }), true);
      const client = api(onlyOn('mesh'), { pool: 'mesh' });
      assert.equal(await shouldKeepOnShutdown({ ...base, lookup: realLookup(client) }), true);
      assert.ok(client.paths.includes('/api/v1/nodes/node-1'), 'the affinity is checked against the node labels');
    });

    it(`${mode}: cleans up when the DaemonSet is gone, deleting, no longer targets this node, or its RBAC is gone`, async () => {
      const cases: [string, KubeClient][] = [
        ['gone (helm uninstall)', api(new KubeApiError('daemonsets "istio-cni-node" not found', 404))],
        ['deleting', api({ metadata: { deletionTimestamp: '2026-01-01T00:00:00Z' } })],
        ['no longer targets this node', api(onlyOn('mesh'), { pool: 'other' })],
        ['forbidden', api(new KubeApiError('forbidden', 403))],
        ['service account gone', api(new KubeApiError('Unauthorized', 401))],
      ];
      for (const [what, client] of cases) {
        const l = realLookup(client);
        assert.equal(await shouldKeepOnShutdown({ ...base, lookup: l }), false, what);
        assert.equal(l.calls, 1, `${what}: a definite answer is not retried`);
      }
    });

    it(`${mode}: AMBIENT_DISABLE_SAFE_UPGRADE always cleans up, without asking the API`, async () => {
      const l = lookup({ kind: 'present', deleting: false, targetsThisNode: true });
      assert.equal(await shouldKeepOnShutdown({ ...base, disableSafeUpgrade: true, lookup: l }), false);
      assert.equal(l.calls, 0);
    });
  }

  it('sidecar: a failing lookup (API down) is tried three times, then keeps everything', async () => {
    const down = realLookup(api(new Error('connect ECONNREFUSED')));
    assert.equal(await shouldKeepOnShutdown({ ...sidecar, lookup: down }), true);
    assert.equal(down.calls, 3);
    const recovers = lookup(new Error('timeout'), { kind: 'not-found' });
    assert.equal(await shouldKeepOnShutdown({ ...sidecar, lookup: recovers }), false);
    assert.equal(recovers.calls, 2);
  });

  it('sidecar: without API access (no lookup) cleans up as upstream', async () => {
    assert.equal(await shouldKeepOnShutdown({ ...sidecar, lookup: undefined }), false);
    assert.equal(await shouldKeepOnShutdown({ ...sidecar, ownedConfig: true, lookup: undefined }), false);
  });

  it('ambient, normal config: one attempt, cleanup on error (upstream)', async () => {
    const l = lookup(new Error('timeout'), { kind: 'present', deleting: false, targetsThisNode: true });
    assert.equal(await shouldKeepOnShutdown({ ...ambient, lookup: l }), false);
    assert.equal(l.calls, 1);
    assert.equal(await shouldKeepOnShutdown({ ...ambient, lookup: undefined }), false);
  });

  it('ambient, owned config: up to three attempts, keep on error (upstream)', async () => {
    const failing = lookup(new Error('a'), new Error('b'), new Error('c'));
    assert.equal(await shouldKeepOnShutdown({ ...ambient, ownedConfig: true, lookup: failing }), true);
    assert.equal(failing.calls, 3);
    const recovers = lookup(new Error('a'), { kind: 'not-found' });
    assert.equal(await shouldKeepOnShutdown({ ...ambient, ownedConfig: true, lookup: recovers }), false);
    assert.equal(recovers.calls, 2);
    assert.equal(await shouldKeepOnShutdown({ ...ambient, ownedConfig: true, lookup: undefined }), true);
  });
});
