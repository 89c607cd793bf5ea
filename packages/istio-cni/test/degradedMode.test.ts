import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { redirectFromPod, type Namespace, type Pod } from '@istio-cni/capture';
import { CniError, parseNetConf } from '@istio-cni/cni';
import { UPGRADE_HANDOVER_GRACE_MS, createJsonLogger, parsePluginConfig } from '@istio-cni/handoff';
import { PodNetnsRefusedError } from '@istio-cni/dataplane/sidecar';

import { ApiRequestError, ApiUnauthorizedError } from '../src/degraded/apiReader.ts';
import { degradedAdd, degradedCheck, degradedStatus, type DegradedDeps } from '../src/degraded/degradedMode.ts';

const log = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });
const k8s = { podName: 'web-0', podNamespace: 'default', podUid: 'u', podInfraContainerId: 'c' };
const policy = { deadlineMs: 5_000, intervalMs: 1_000 };

const sidecar: Pod = {
  metadata: { name: 'web-0', namespace: 'default', annotations: { 'sidecar.istio.io/status': '{}' } },
  spec: { containers: [{ name: 'app' }, { name: 'istio-proxy' }] },
};
const plain: Pod = { metadata: { name: 'web-0', namespace: 'default' }, spec: { containers: [{ name: 'app' }] } };
const ambientNs: Namespace = { metadata: { name: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } } };

function config(ambient = false) {
  return parsePluginConfig(
    parseNetConf(
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'n',
        type: 'istio-cni',
        ambient_enabled: ambient,
        enablement_selectors: [{ namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } }],
      }),
    ),
  );
}

function fakeDeps(
  pod: Pod | undefined | Error[],
  opts: { namespace?: Namespace; applyError?: Error } = {},
): DegradedDeps & { applied: string[]; verified: string[]; clock: number } {
  const failures = Array.isArray(pod) ? [...pod] : [];
  const deps = {
    applied: [] as string[],
    verified: [] as string[],
    clock: 0,
    async getPod() {
      const f = failures.shift();
      if (f) throw f;
      return Array.isArray(pod) ? sidecar : pod;
    },
    async getNamespace() {
      return opts.namespace;
    },
    async applySidecar(p: Pod, netns: string) {
      if (opts.applyError) throw opts.applyError;
      redirectFromPod(p);
      deps.applied.push(netns);
      return 'applied';
    },
    async verifySidecar(_p: Pod, netns: string) {
      deps.verified.push(netns);
      return deps.applied.length ? [] : ['nat ISTIO_OUTPUT missing'];
    },
    async sleep(ms: number) {
      deps.clock += ms;
    },
    now: () => deps.clock,
  };
  return deps;
}

const code = (n: number, msg?: RegExp) => (err: unknown) => err instanceof CniError && err.code === n && (!msg || msg.test(err.message));

describe('degraded ADD (agent unreachable)', () => {
  it('passes a plain pod through', async () => {
    const deps = fakeDeps(plain);
    assert.deepEqual(await degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy), {
      action: 'skipped',
      reason: 'pod has no istio-proxy container',
    });
    assert.deepEqual(deps.applied, []);
    assert.deepEqual(deps.verified, []);
  });

  it('programs the capture rules for a sidecar pod itself', async () => {
    const deps = fakeDeps(sidecar);
    assert.deepEqual(await degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy), {
      action: 'redirected',
      outcome: 'applied',
    });
    assert.deepEqual(deps.applied, ['/ns']);
    // ADD programs the rules; verifying them is CHECK's job.
    assert.deepEqual(deps.verified, []);
  });

  it("warns when a dual-stack pod's capture leaves its IPv6 address out (no ISTIO_DUAL_STACK), and not when it is set", async () => {
    const lines: Record<string, unknown>[] = [];
    const warnLog = createJsonLogger({ scope: 'test', threshold: 'warn', sink: (l) => lines.push(JSON.parse(l)) });
    const dualIps = ['10.0.0.5/24', 'fd00::5/64'];
    await degradedAdd(fakeDeps(sidecar), config(), k8s, '/ns', dualIps, warnLog, policy);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.level, 'warn');
    assert.match(String(lines[0]?.msg), /IPv6 traffic is not captured.*ISTIO_DUAL_STACK/);
    assert.deepEqual(lines[0]?.ipv6, ['fd00::5']);

    lines.length = 0;
    const dualStack: Pod = {
      ...sidecar,
      spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', env: [{ name: 'ISTIO_DUAL_STACK', value: 'true' }] }] },
    };
    await degradedAdd(fakeDeps(dualStack), config(), k8s, '/ns', dualIps, warnLog, policy);
    await degradedAdd(fakeDeps(sidecar), config(), k8s, '/ns', ['fd00::5/64'], warnLog, policy);
    assert.deepEqual(lines, []);
  });

  it('fails an ambient pod closed with code 11', async () => {
    const deps = fakeDeps(plain, { namespace: ambientNs });
    await assert.rejects(degradedAdd(deps, config(true), k8s, '/ns', ['10.0.0.5/24'], log, policy), code(11, /ambient pod/));
    assert.deepEqual(deps.applied, []);
    assert.deepEqual(deps.verified, []);
  });

  it('retries transient API errors within the deadline', async () => {
    const deps = fakeDeps([new ApiRequestError('HTTP 503'), new ApiRequestError('HTTP 503')]);
    const out = await degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy);
    assert.equal(out.action, 'redirected');
    assert.equal(deps.clock, 2_000);
  });

  it('gives up with code 11 at the deadline', async () => {
    const deps = fakeDeps(Array.from({ length: 100 }, () => new ApiRequestError('connection refused')));
    await assert.rejects(
      degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy),
      code(11, /after 5 attempt\(s\): connection refused/),
    );
    assert.ok(deps.clock < policy.deadlineMs);
  });

  it('reports Unauthorized as such, without retrying', async () => {
    const deps = fakeDeps([new ApiUnauthorizedError('Unauthorized: the API server rejected the istio-cni token (expired or revoked?)')]);
    await assert.rejects(degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy), code(11, /Unauthorized/));
    assert.equal(deps.clock, 0);
  });

  it('fails with code 7 naming the annotation for an invalid annotation, applying nothing', async () => {
    const bad: Pod = {
      ...sidecar,
      metadata: { ...sidecar.metadata, annotations: { ...sidecar.metadata.annotations, 'sidecar.istio.io/interceptionMode': 'MAGIC' } },
    };
    const deps = fakeDeps(bad);
    await assert.rejects(
      degradedAdd(deps, config(), k8s, '/ns', ['10.0.0.5/24'], log, policy),
      code(7, /sidecar\.istio\.io\/interceptionMode="MAGIC"/),
    );
    assert.deepEqual(deps.applied, []);
    assert.deepEqual(deps.verified, []);
  });

  it("fails with code 8 naming the netns when the capture refuses it (the node's own)", async () => {
    const deps = fakeDeps(sidecar, { applyError: new PodNetnsRefusedError('/proc/1/ns/net', "it is the node's own network namespace") });
    await assert.rejects(
      degradedAdd(deps, config(), k8s, '/proc/1/ns/net', ['10.0.0.5/24'], log, policy),
      code(8, /^refusing network namespace "\/proc\/1\/ns\/net": it is the node's own network namespace$/),
    );
    assert.deepEqual(deps.applied, []);
  });

  it('answers 11 for a pod the API does not have', async () => {
    await assert.rejects(degradedAdd(fakeDeps(undefined), config(), k8s, '/ns', ['10.0.0.5/24'], log, policy), code(11, /not found/));
  });
});

describe('degraded CHECK', () => {
  it('verifies a sidecar pod rules directly and reports what is missing', async () => {
    const deps = fakeDeps(sidecar);
    await assert.rejects(
      degradedCheck(deps, config(), k8s, '/ns', policy),
      (e: unknown) => e instanceof CniError && e.details === 'nat ISTIO_OUTPUT missing',
    );
    assert.deepEqual(deps.verified, ['/ns']);
    assert.deepEqual(deps.applied, []);
  });
  it('succeeds for a sidecar pod whose rules are all there', async () => {
    const deps = fakeDeps(sidecar);
    deps.applied.push('/ns');
    await degradedCheck(deps, config(), k8s, '/ns', policy);
    assert.deepEqual(deps.verified, ['/ns']);
  });
  it('succeeds for a pod that is not captured, without looking at any rules', async () => {
    const deps = fakeDeps(plain);
    await degradedCheck(deps, config(), k8s, '/ns', policy);
    assert.deepEqual(deps.verified, []);
    assert.deepEqual(deps.applied, []);
  });
});

describe('degraded STATUS (agent not ready)', () => {
  it('can decide pods when the token reads pods and ambient is off', async () => {
    let probes = 0;
    assert.equal(
      await degradedStatus(config(false), async () => {
        probes++;
      }),
      undefined,
    );
    assert.equal(probes, 1);
  });

  it('cannot with ambient enabled, without asking the API', async () => {
    let probes = 0;
    const reason = await degradedStatus(config(true), async () => {
      probes++;
    });
    assert.match(reason ?? '', /only the agent can enrol an ambient pod/);
    assert.equal(probes, 0);
  });

  it('can while an agent that stopped for an upgrade handed over less than the grace ago, without asking the API', async () => {
    for (const ambient of [false, true]) {
      let probes = 0;
      const probe = async () => {
        probes++;
        throw new Error('Unauthorized');
      };
      assert.equal(await degradedStatus(config(ambient), probe, async () => 5_000), undefined);
      assert.equal(probes, 0);
      // A stale hand-over (the successor never came) or a clock gone backwards counts for nothing.
      for (const age of [UPGRADE_HANDOVER_GRACE_MS, -1]) {
        assert.notEqual(await degradedStatus(config(ambient), probe, async () => age), undefined);
      }
    }
  });

  it('cannot when the probe fails, naming what the API answered', async () => {
    for (const err of [
      new ApiUnauthorizedError('Unauthorized: the API server rejected the istio-cni token (expired or revoked?)'),
      new ApiRequestError('GET /api/v1/namespaces/kube-system/pods/x: HTTP 403: forbidden', 403),
      new Error('/run/istio-cni/istio-cni-kubeconfig: ENOENT'),
    ]) {
      const reason = await degradedStatus(config(false), async () => {
        throw err;
      });
      assert.equal(reason, `degraded mode cannot decide pods either: ${err.message}`);
    }
  });
});
