import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_ENABLEMENT_SELECTORS, type Namespace, type Pod } from '@istio-cni/capture';
import { PodNetnsRefusedError } from '@istio-cni/dataplane';
import { createJsonLogger, type HandoffRequest } from '@istio-cni/handoff';
import { Registry } from 'prom-client';
import { createAgentMetrics } from '../src/agent/agentMetrics.ts';
import { createConcurrencyLimiter } from '../src/agent/concurrencyLimiter.ts';
import { ADOPTED_KEY_PREFIX, createNodeAgentHandler, type NodeAgentDeps, type SidecarCapture } from '../src/agent/nodeAgentHandler.ts';
import { ObjectStore, type ClusterView, type KubeReader } from '../src/kube/clusterView.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

function sidecarPod(
  name: string,
  extra: { annotations?: Record<string, string>; labels?: Record<string, string>; containers?: Pod['spec'] } = {},
): Pod {
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}', ...extra.annotations },
      labels: extra.labels ?? {},
    },
    spec: extra.containers ?? { containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }] },
  };
}

function plainPod(name: string, namespace = 'default', labels: Record<string, string> = {}): Pod {
  return { metadata: { name, namespace, uid: `uid-${name}`, labels }, spec: { containers: [{ name: 'app' }] } };
}

interface Harness {
  deps: NodeAgentDeps;
  applied: { pod: string; netns: string; freshNetns?: boolean }[];
  fetched: string[];
  pods: ObjectStore<Pod>;
  namespaces: ObjectStore<Namespace>;
}

function harness(
  opts: {
    pods?: Pod[];
    apiPods?: Pod[];
    namespaces?: Namespace[];
    ambient?: boolean;
    capture?: Partial<SidecarCapture>;
    ready?: string;
  } = {},
): Harness {
  const pods = new ObjectStore<Pod>();
  const namespaces = new ObjectStore<Namespace>();
  for (const p of opts.pods ?? []) pods.upsert(p);
  for (const n of opts.namespaces ?? []) namespaces.upsert(n);
  const applied: { pod: string; netns: string; freshNetns?: boolean }[] = [];
  const fetched: string[] = [];
  const view: ClusterView = {
    getPod: (ns, name) => pods.get(ns, name),
    getNamespace: (name) => namespaces.get(undefined, name),
    listPods: () => pods.list(),
    isSynced: () => true,
    onPodChange: (h) => pods.onChange(h),
    onNamespaceChange: (h) => namespaces.onChange(h),
  };
  const reader: KubeReader = {
    async getPod(ns, name) {
      fetched.push(`${ns}/${name}`);
      return (opts.apiPods ?? []).find((p) => p.metadata.namespace === ns && p.metadata.name === name);
    },
    async getNamespace() {
      return undefined;
    },
  };
  const capture: SidecarCapture = {
    async apply(pod, netns, _podIps, freshNetns) {
      applied.push({ pod: pod.metadata.name ?? '', netns, ...(freshNetns === undefined ? {} : { freshNetns }) });
      return 'applied';
    },
    async verify() {
      return [];
    },
    ...opts.capture,
  };
  return {
    applied,
    fetched,
    pods,
    namespaces,
    deps: {
      view,
      reader,
      capture,
      policy: { agentNamespace: 'istio-system', excludeNamespaces: ['kube-system'] },
      ambient: { enabled: opts.ambient ?? false, selectors: DEFAULT_ENABLEMENT_SELECTORS },
      limiter: createConcurrencyLimiter(4, 100),
      logger,
      notReadyReason: () => opts.ready,
    },
  };
}

function request(command: HandoffRequest['command'], namespace: string, name: string, uid = `uid-${name}`): HandoffRequest {
  return {
    protocol: 1,
    command,
    cniVersion: '1.0.0',
    containerId: `ctr-${name}`,
    netns: `/var/run/netns/${name}`,
    ifName: 'eth0',
    pod: { name, namespace, uid, infraContainerId: `ctr-${name}` },
    ips: [{ address: '10.0.0.9/24' }],
  };
}

describe('node agent ADD decisions (upstream CmdAdd order and plugin_test.go cases)', () => {
  const cases: [string, Pod, string][] = [
    ['sidecar pod is redirected', sidecarPod('web'), 'redirected'],
    [
      'pod with istio-init is skipped',
      sidecarPod('init', { containers: { initContainers: [{ name: 'istio-init' }], containers: [{ name: 'istio-proxy' }] } }),
      'skipped',
    ],
    ['pod without istio-proxy is skipped', plainPod('plain'), 'skipped'],
    [
      'DISABLE_ENVOY=true is skipped',
      sidecarPod('noenvoy', { containers: { containers: [{ name: 'istio-proxy', env: [{ name: 'DISABLE_ENVOY', value: 'true' }] }] } }),
      'skipped',
    ],
    [
      'gateway proxy type is skipped',
      sidecarPod('gw', { containers: { containers: [{ name: 'istio-proxy', args: ['proxy', 'router'] }] } }),
      'skipped',
    ],
    ['inject=false label is skipped', sidecarPod('nolabel', { labels: { 'sidecar.istio.io/inject': 'false' } }), 'skipped'],
    ['inject=false annotation is skipped', sidecarPod('noann', { annotations: { 'sidecar.istio.io/inject': 'false' } }), 'skipped'],
    [
      'label true wins over annotation false',
      sidecarPod('labelwins', { labels: { 'sidecar.istio.io/inject': 'true' }, annotations: { 'sidecar.istio.io/inject': 'false' } }),
      'redirected',
    ],
    ['non-bool inject value is ignored', sidecarPod('nonbool', { labels: { 'sidecar.istio.io/inject': 'maybe' } }), 'redirected'],
    [
      'native sidecar (istio-proxy as init container) is redirected',
      sidecarPod('native', { containers: { initContainers: [{ name: 'istio-proxy' }], containers: [{ name: 'app' }] } }),
      'redirected',
    ],
  ];
  for (const [name, pod, want] of cases) {
    it(name, async () => {
      const h = harness({ pods: [pod] });
      const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', pod.metadata.name ?? ''));
      assert.ok('verdict' in out, JSON.stringify(out));
      assert.equal(out.verdict, want, JSON.stringify(out));
      assert.equal(h.applied.length, want === 'redirected' ? 1 : 0);
      // A CNI ADD's netns is new: the other iptables backend need not be examined.
      if (want === 'redirected')
        assert.deepEqual(h.applied[0], { pod: pod.metadata.name, netns: `/var/run/netns/${pod.metadata.name}`, freshNetns: true });
    });
  }

  it("warns, naming the pod, when a dual-stack pod's capture leaves its IPv6 address out (no ISTIO_DUAL_STACK); not when it is set", async () => {
    const lines: Record<string, unknown>[] = [];
    const withIps = (name: string) => ({
      ...request('ADD', 'default', name),
      ips: [{ address: '10.0.0.9/24' }, { address: 'fd00::9/64' }],
    });
    const dual = sidecarPod('dual', {
      containers: { containers: [{ name: 'istio-proxy', env: [{ name: 'ISTIO_DUAL_STACK', value: 'true' }] }] },
    });
    const h = harness({ pods: [sidecarPod('v4first'), dual] });
    const handler = createNodeAgentHandler({
      ...h.deps,
      logger: createJsonLogger({ scope: 'test', threshold: 'warn', sink: (l) => lines.push(JSON.parse(l)) }),
    });
    await handler.handle(withIps('v4first'));
    await handler.handle(withIps('dual'));
    assert.equal(lines.length, 1, JSON.stringify(lines));
    assert.match(String(lines[0]?.msg), /IPv6 traffic is not captured/);
    assert.equal(lines[0]?.pod, 'default/v4first');
    assert.deepEqual(lines[0]?.ipv6, ['fd00::9']);
  });

  it('pod without the status annotation is skipped', async () => {
    const base = sidecarPod('nostatus');
    const pod: Pod = { ...base, metadata: { ...base.metadata, annotations: {} } };
    const h = harness({ pods: [pod] });
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'nostatus'));
    assert.deepEqual(out, { protocol: 1, verdict: 'skipped', reason: 'pod has no sidecar.istio.io/status annotation' });
  });

  it('skips the agent pod and excluded namespaces without any lookup', async () => {
    const h = harness();
    const handler = createNodeAgentHandler(h.deps);
    const agent = await handler.handle(request('ADD', 'istio-system', 'istio-cni-node-abcde'));
    const excluded = await handler.handle(request('ADD', 'kube-system', 'coredns'));
    assert.deepEqual(
      [agent, excluded].map((o) => ('verdict' in o ? o.reason : o)),
      ['istio-cni agent pod', 'excluded namespace'],
    );
    assert.deepEqual(h.fetched, []);
  });

  it('fetches a pod missing from the cache once, directly', async () => {
    const h = harness({ apiPods: [sidecarPod('late')] });
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'late'));
    assert.equal('verdict' in out && out.verdict, 'redirected');
    assert.deepEqual(h.fetched, ['default/late']);
  });

  it('re-fetches when the cached pod has another UID (a recreated StatefulSet pod)', async () => {
    const stale = plainPod('db-0');
    const fresh = { ...sidecarPod('db-0'), metadata: { ...sidecarPod('db-0').metadata, uid: 'uid-new' } };
    const h = harness({ pods: [stale], apiPods: [fresh] });
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'db-0', 'uid-new'));
    assert.equal('verdict' in out && out.verdict, 'redirected');
    assert.deepEqual(h.fetched, ['default/db-0']);
  });

  it('answers 11 naming the call when the API stays unavailable for a pod the cache lacks; 999 for a final API answer', async () => {
    const { KubeApiError, KubeConnectionError } = await import('@istio-cni/kube');
    for (const [err, code] of [
      [new KubeConnectionError('GET /api/v1/namespaces/default/pods/p: socket hang up', new Error('socket hang up'), true), 11],
      [new KubeApiError('GET /api/v1/namespaces/default/pods/p: HTTP 429: slow down', 429), 11],
      [new KubeApiError('GET /api/v1/namespaces/default/pods/p: HTTP 503: upgrading', 503), 11],
      [new KubeApiError('GET /api/v1/namespaces/default/pods/p: HTTP 403: forbidden', 403), 999],
    ] as const) {
      const h = harness();
      h.deps.reader.getPod = async () => {
        throw err;
      };
      const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'p'));
      assert.ok('error' in out, JSON.stringify(out));
      assert.equal(out.error.code, code, err.message);
      assert.match(out.error.msg, /GET \/api\/v1\/namespaces\/default\/pods\/p/);
    }
  });

  it('answers 11 for a pod the API does not know', async () => {
    const out = await createNodeAgentHandler(harness().deps).handle(request('ADD', 'default', 'ghost'));
    assert.deepEqual('error' in out && out.error.code, 11);
  });

  it('fails the ADD with code 7 naming the annotation, and applies nothing, for an invalid annotation', async () => {
    const pod = sidecarPod('bad', { annotations: { 'traffic.sidecar.istio.io/excludeOutboundIPRanges': '10.0.0.0/33' } });
    const h = harness({ pods: [pod] });
    // The real capture validates through planSidecarCapture; emulate it with the same parser.
    const { redirectFromPod } = await import('@istio-cni/capture');
    h.deps.capture = {
      apply: async (p) => {
        redirectFromPod(p);
        return 'applied';
      },
      verify: async () => [],
    };
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'bad'));
    assert.ok('error' in out);
    assert.equal(out.error.code, 7);
    assert.match(out.error.msg, /traffic\.sidecar\.istio\.io\/excludeOutboundIPRanges="10\.0\.0\.0\/33"/);
  });

  it("fails a sidecar ADD into a refused netns (the node's own) with code 8 naming the netns", async () => {
    const h = harness({ pods: [sidecarPod('hostns')] });
    h.deps.capture = {
      apply: async (_pod, netns) => {
        throw new PodNetnsRefusedError(netns, "it is the node's own network namespace");
      },
      verify: async () => [],
    };
    const handler = createNodeAgentHandler(h.deps);
    const out = await handler.handle(request('ADD', 'default', 'hostns'));
    assert.deepEqual(out, {
      error: { code: 8, msg: 'refusing network namespace "/var/run/netns/hostns": it is the node\'s own network namespace' },
    });
    assert.equal(handler.attachments().size, 0, 'not remembered as captured');
  });

  it('answers ambient pods with a retryable error while ambient is not programmed', async () => {
    const h = harness({ ambient: true, pods: [plainPod('amb', 'default', { 'istio.io/dataplane-mode': 'ambient' })] });
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'amb'));
    assert.equal('error' in out && out.error.code, 11);
    assert.equal(h.applied.length, 0);
  });

  it('treats a sidecar-injected pod in an ambient namespace as a sidecar pod', async () => {
    const h = harness({
      ambient: true,
      pods: [sidecarPod('sc')],
      namespaces: [{ metadata: { name: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } } }],
    });
    const out = await createNodeAgentHandler(h.deps).handle(request('ADD', 'default', 'sc'));
    assert.equal('verdict' in out && out.verdict, 'redirected');
  });
});

describe('node agent CHECK, GC, STATUS, DEL', () => {
  it('CHECK reports missing rules for a sidecar pod and succeeds for skipped pods', async () => {
    const h = harness({ pods: [sidecarPod('web'), plainPod('plain')], capture: { verify: async () => ['nat ISTIO_OUTPUT missing'] } });
    const handler = createNodeAgentHandler(h.deps);
    const web = await handler.handle(request('CHECK', 'default', 'web'));
    assert.ok('error' in web);
    assert.equal(web.error.details, 'nat ISTIO_OUTPUT missing');
    const plain = await handler.handle(request('CHECK', 'default', 'plain'));
    assert.equal('verdict' in plain && plain.verdict, 'ok');
  });

  it("an ADD remembers the netns file's inode, which verification compares before touching the netns", async () => {
    const h = harness({ pods: [sidecarPod('web')] });
    const handler = createNodeAgentHandler({ ...h.deps, netnsInode: (netns) => (netns === '/var/run/netns/web' ? 4026532111 : undefined) });
    await handler.handle(request('ADD', 'default', 'web'));
    assert.equal(handler.attachments().get('ctr-web/eth0')?.netnsInode, 4026532111);
  });

  it('GC drops attachments not in the valid list; DEL drops its own', async () => {
    const h = harness({ pods: [sidecarPod('a'), sidecarPod('b'), sidecarPod('c')] });
    const handler = createNodeAgentHandler(h.deps);
    for (const p of ['a', 'b', 'c']) await handler.handle(request('ADD', 'default', p));
    assert.equal(handler.attachments().size, 3);
    await handler.handle(request('DEL', 'default', 'c'));
    assert.deepEqual([...handler.attachments().keys()], ['ctr-a/eth0', 'ctr-b/eth0']);
    const gc = await handler.handle({ ...request('GC', '', ''), validAttachments: [{ containerId: 'ctr-a', ifName: 'eth0' }] });
    assert.equal('verdict' in gc && gc.reason, 'dropped 1 stale attachment(s)');
    assert.deepEqual([...handler.attachments().keys()], ['ctr-a/eth0']);
  });

  it('GC keeps adopted attachments (no container ID names them: pod deletion drops them); forget drops one', async () => {
    const h = harness({ pods: [sidecarPod('a')] });
    const handler = createNodeAgentHandler(h.deps);
    await handler.handle(request('ADD', 'default', 'a'));
    handler.adopt(`${ADOPTED_KEY_PREFIX}uid-b`, {
      namespace: 'default',
      name: 'b',
      uid: 'uid-b',
      netns: '/host/proc/9/ns/net',
      mode: 'sidecar',
    });
    await handler.handle({ ...request('GC', '', ''), validAttachments: [] });
    assert.deepEqual([...handler.attachments().keys()], [`${ADOPTED_KEY_PREFIX}uid-b`]);
    handler.forget(`${ADOPTED_KEY_PREFIX}uid-b`);
    assert.equal(handler.attachments().size, 0);
  });

  it('STATUS is 50 with the reason until ready', async () => {
    const notReady = await createNodeAgentHandler(harness({ ready: 'watches not synced' }).deps).handle(request('STATUS', '', ''));
    assert.deepEqual(notReady, { error: { code: 50, msg: 'watches not synced' } });
    const ready = await createNodeAgentHandler(harness().deps).handle(request('STATUS', '', ''));
    assert.equal('verdict' in ready && ready.verdict, 'ok');
  });

  it('turns a failing capture into code 999 without affecting the next pod', async () => {
    let calls = 0;
    const h = harness({
      pods: [sidecarPod('x'), sidecarPod('y')],
      capture: {
        apply: async () => {
          if (calls++ === 0) throw new Error('iptables-restore: line 3 failed');
          return 'applied';
        },
      },
    });
    const handler = createNodeAgentHandler(h.deps);
    const x = await handler.handle(request('ADD', 'default', 'x'));
    assert.deepEqual(x, { error: { code: 999, msg: 'iptables-restore: line 3 failed' } });
    const y = await handler.handle(request('ADD', 'default', 'y'));
    assert.equal('verdict' in y && y.verdict, 'redirected');
  });
});

describe('bounded concurrency', () => {
  it('runs at most N capture programs at once, queues the rest, and refuses beyond the queue', async () => {
    let running = 0;
    let peak = 0;
    const release: (() => void)[] = [];
    const pods = Array.from({ length: 12 }, (_, i) => sidecarPod(`p${i}`));
    const h = harness({
      pods,
      capture: {
        apply: async () => {
          running++;
          peak = Math.max(peak, running);
          await new Promise<void>((r) => release.push(r));
          running--;
          return 'applied';
        },
      },
    });
    h.deps.limiter = createConcurrencyLimiter(3, 6);
    const handler = createNodeAgentHandler(h.deps);
    const pending = pods.map((p) => handler.handle(request('ADD', 'default', p.metadata.name ?? '')));
    // 3 running + 6 queued are accepted; the other 3 are refused with "try again later".
    await new Promise((r) => setImmediate(r));
    while (release.length > 0 || running > 0) {
      release.shift()?.();
      await new Promise((r) => setImmediate(r));
    }
    const results = await Promise.all(pending);
    assert.equal(peak, 3);
    assert.equal(results.filter((r) => 'verdict' in r).length, 9);
    assert.equal(results.filter((r) => 'error' in r && r.error.code === 11).length, 3);
  });
});

describe('ambient ADD', () => {
  function ambientHarness(fail?: Error) {
    const h = harness({ ambient: true, pods: [plainPod('amb', 'default', { 'istio.io/dataplane-mode': 'ambient' })] });
    const adds: { ips: readonly string[]; netns: string | undefined }[] = [];
    h.deps.ambient = {
      ...h.deps.ambient,
      dataplane: {
        async addPodToMesh(_pod, ips, netns) {
          adds.push({ ips, netns });
          if (fail) throw fail;
        },
        async removePodFromMesh() {},
        async syncPodIps() {},
        async replaceNetns() {},
        holdsNetns: () => false,
      },
    };
    return { h, adds };
  }
  const req = (): HandoffRequest => ({
    ...request('ADD', 'default', 'amb'),
    ips: [{ address: '10.0.0.9/24' }, { address: '::ffff:10.0.0.10/120' }, { address: 'fd00::9/64' }],
  });

  it('enrols the pod with the IPs of the CNI result (prefix dropped, IPv4-mapped unmapped) and its netns', async () => {
    const { h, adds } = ambientHarness();
    const out = await createNodeAgentHandler(h.deps).handle(req());
    assert.deepEqual(out, { protocol: 1, verdict: 'enrolled' });
    assert.deepEqual(adds, [{ ips: ['10.0.0.9', '10.0.0.10', 'fd00::9'], netns: '/var/run/netns/amb' }]);
  });

  it('fails closed with code 11 when ztunnel has not taken the pod', async () => {
    const { RetryableError } = await import('../src/ambient/meshDataplane.ts');
    const { h } = ambientHarness(new RetryableError('ztunnel did not take the pod: no ztunnel connection'));
    const out = await createNodeAgentHandler(h.deps).handle(req());
    assert.deepEqual(out, { error: { code: 11, msg: 'ztunnel did not take the pod: no ztunnel connection' } });
  });

  it("answers a refused netns (the node's own) with code 8 and does not remember the pod", async () => {
    const { h } = ambientHarness(new PodNetnsRefusedError('/proc/1/ns/net', "it is the node's own network namespace"));
    const handler = createNodeAgentHandler(h.deps);
    const out = await handler.handle(req());
    assert.deepEqual(out, {
      error: { code: 8, msg: 'refusing network namespace "/proc/1/ns/net": it is the node\'s own network namespace' },
    });
    assert.equal(handler.attachments().size, 0);
  });

  it('answers a non-retryable failure with code 999', async () => {
    const { NonRetryableError } = await import('../src/ambient/meshDataplane.ts');
    const { h } = ambientHarness(new NonRetryableError("failed to open the pod's network namespace"));
    const out = await createNodeAgentHandler(h.deps).handle(req());
    assert.equal('error' in out && out.error.code, 999);
  });
});

describe('pod capture latency (istio_cni_pod_capture_duration_seconds)', () => {
  /** A clock the fakes advance: an ADD takes exactly what its capture step adds. */
  function fakeClock() {
    let t = 1_000_000_000n;
    return {
      now: () => t,
      advance(ns: bigint) {
        t += ns;
      },
    };
  }

  function metered(h: Harness, clock: ReturnType<typeof fakeClock>): Registry {
    const registry = new Registry();
    h.deps.clock = clock.now;
    h.deps.metrics = createAgentMetrics(registry);
    return registry;
  }

  /** A sidecar pod `web` whose capture takes `stepNs`, then fails with `fail` if given. */
  function sidecarAdd(stepNs: bigint, fail?: Error) {
    const clock = fakeClock();
    const h = harness({
      pods: [sidecarPod('web')],
      capture: {
        async apply() {
          clock.advance(stepNs);
          if (fail) throw fail;
          return 'applied';
        },
      },
    });
    const registry = metered(h, clock);
    return { handler: createNodeAgentHandler(h.deps), registry };
  }

  /** The exposition lines of one metric, as scraped: `name{labels} value`. */
  async function scraped(registry: Registry, name: string): Promise<{ sample: string; labels: string; value: number }[]> {
    const text = await registry.getSingleMetricAsString(name);
    return [...text.matchAll(/^(\w+)\{([^}]*)\} (\S+)$/gm)].map((m) => ({
      sample: m[1] ?? '',
      labels: m[2] ?? '',
      value: Number(m[3]),
    }));
  }

  /** Observation counts and sums per label set, only series with observations. */
  async function series(registry: Registry, name: string): Promise<Record<string, { count: number; sum: number }>> {
    const out: Record<string, { count: number; sum: number }> = {};
    for (const { sample, labels, value } of await scraped(registry, name)) {
      if (sample !== `${name}_count` && sample !== `${name}_sum`) continue;
      const entry = out[labels] ?? { count: 0, sum: 0 };
      out[labels] = entry;
      if (sample === `${name}_count`) entry.count = value;
      else entry.sum = value;
    }
    return Object.fromEntries(Object.entries(out).filter(([, e]) => e.count > 0));
  }

  async function bucket(registry: Registry, labels: string): Promise<number | undefined> {
    const name = 'istio_cni_pod_capture_duration_seconds';
    return (await scraped(registry, name)).find((s) => s.sample === `${name}_bucket` && s.labels === labels)?.value;
  }

  it('observes a sidecar ADD once, from its arrival to the rules applied', async () => {
    const { handler, registry } = sidecarAdd(250_000_000n);
    const out = await handler.handle(request('ADD', 'default', 'web'));
    assert.equal('verdict' in out && out.verdict, 'redirected');
    assert.deepEqual(await series(registry, 'istio_cni_pod_capture_duration_seconds'), {
      'mode="sidecar",result="success"': { count: 1, sum: 0.25 },
    });
    assert.equal(await bucket(registry, 'le="0.1",mode="sidecar",result="success"'), 0);
    assert.equal(await bucket(registry, 'le="0.25",mode="sidecar",result="success"'), 1);
    assert.deepEqual(await series(registry, 'istio_cni_plugin_request_duration_seconds'), {
      'command="ADD",result="success"': { count: 1, sum: 0.25 },
    });
  });

  it('counts a sidecar capture that throws under its CNI error code', async () => {
    const { handler, registry } = sidecarAdd(2_000_000_000n, new Error('iptables-restore: exit 1'));
    const out = await handler.handle(request('ADD', 'default', 'web'));
    assert.equal('error' in out && out.error.code, 999);
    assert.deepEqual(await series(registry, 'istio_cni_pod_capture_duration_seconds'), {
      'mode="sidecar",result="error_999"': { count: 1, sum: 2 },
    });
  });

  it('observes ambient ADDs under mode=ambient: enrolled, ztunnel not acking, non-retryable, agent still starting', async () => {
    const { RetryableError, NonRetryableError } = await import('../src/ambient/meshDataplane.ts');
    const failures: (Error | undefined)[] = [
      undefined,
      new RetryableError('ztunnel did not take the pod'),
      new NonRetryableError('no netns'),
    ];
    const clock = fakeClock();
    const h = harness({ ambient: true, pods: [plainPod('amb', 'default', { 'istio.io/dataplane-mode': 'ambient' })] });
    const registry = metered(h, clock);
    h.deps.ambient = {
      ...h.deps.ambient,
      dataplane: {
        async addPodToMesh() {
          clock.advance(500_000_000n);
          const fail = failures.shift();
          if (fail) throw fail;
        },
        async removePodFromMesh() {},
        async syncPodIps() {},
        async replaceNetns() {},
        holdsNetns: () => false,
      },
    };
    const handler = createNodeAgentHandler(h.deps);
    for (let i = 0; i < 3; i++) await handler.handle(request('ADD', 'default', 'amb'));
    const { dataplane: _started, ...starting } = h.deps.ambient;
    await createNodeAgentHandler({ ...h.deps, ambient: starting }).handle(request('ADD', 'default', 'amb'));
    assert.deepEqual(await series(registry, 'istio_cni_pod_capture_duration_seconds'), {
      'mode="ambient",result="success"': { count: 1, sum: 0.5 },
      'mode="ambient",result="error_11"': { count: 2, sum: 0.5 },
      'mode="ambient",result="error_999"': { count: 1, sum: 0.5 },
    });
  });

  it('observes nothing for pods outside the mesh, pods the API does not know, or commands other than ADD', async () => {
    const h = harness({ pods: [plainPod('plain'), sidecarPod('web'), plainPod('dns', 'kube-system')] });
    const registry = metered(h, fakeClock());
    const handler = createNodeAgentHandler(h.deps);
    await handler.handle(request('ADD', 'default', 'plain'));
    await handler.handle(request('ADD', 'kube-system', 'dns'));
    await handler.handle(request('ADD', 'default', 'gone'));
    await handler.handle(request('CHECK', 'default', 'web'));
    await handler.handle(request('DEL', 'default', 'web'));
    assert.deepEqual(await series(registry, 'istio_cni_pod_capture_duration_seconds'), {});
    assert.deepEqual(await series(registry, 'istio_cni_plugin_request_duration_seconds'), {
      'command="ADD",result="success"': { count: 2, sum: 0 },
      'command="ADD",result="error_11"': { count: 1, sum: 0 },
      'command="CHECK",result="success"': { count: 1, sum: 0 },
      'command="DEL",result="success"': { count: 1, sum: 0 },
    });
  });
});
