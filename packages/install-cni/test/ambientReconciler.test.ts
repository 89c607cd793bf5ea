import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_ENABLEMENT_SELECTORS, type Namespace, type Pod } from '@istio-cni/capture';
import { createJsonLogger } from '@istio-cni/handoff';
import { createAmbientReconciler } from '../src/ambient/ambientReconciler.ts';
import { PodNetnsRefusedError } from '@istio-cni/dataplane';
import { NonRetryableError, RetryableError, type MeshDataplane } from '../src/ambient/meshDataplane.ts';
import { ObjectStore, type ClusterView } from '../src/kube/clusterView.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });
const AMBIENT = { 'istio.io/dataplane-mode': 'ambient' };

interface Call {
  op: 'add' | 'remove' | 'sync';
  pod: string;
  ips?: readonly string[];
  isDelete?: boolean;
  /** The annotation of the pod object handed to the dataplane. */
  annotation?: string | undefined;
}

function pod(
  name: string,
  o: {
    ns?: string;
    labels?: Record<string, string>;
    ips?: string[];
    phase?: string;
    annotation?: string;
    hostNetwork?: boolean;
    uid?: string;
  } = {},
): Pod {
  return {
    metadata: {
      name,
      namespace: o.ns ?? 'default',
      uid: o.uid ?? `uid-${name}`,
      labels: o.labels ?? {},
      annotations: o.annotation ? { 'ambient.istio.io/redirection': o.annotation } : {},
    },
    spec: { containers: [{ name: 'app' }], ...(o.hostNetwork ? { hostNetwork: true } : {}) },
    status: { phase: o.phase ?? 'Running', ...(o.ips ? { podIPs: o.ips.map((ip) => ({ ip })), podIP: o.ips[0] } : {}) },
  };
}

const ns = (name: string, labels: Record<string, string> = {}): Namespace => ({ metadata: { name, labels } });

function setup(opts: { failAdd?: Error[]; failRemove?: Error[]; exclude?: string[]; held?: string[] } = {}) {
  /** UIDs whose netns the dataplane holds: enrolled through it (or given, as a running agent would). */
  const held = new Set(opts.held ?? []);
  const pods = new ObjectStore<Pod>();
  const namespaces = new ObjectStore<Namespace>();
  const calls: Call[] = [];
  const addFailures = [...(opts.failAdd ?? [])];
  const removeFailures = [...(opts.failRemove ?? [])];
  const annotation = (p: Pod) => p.metadata.annotations?.['ambient.istio.io/redirection'];
  const dataplane: MeshDataplane = {
    async addPodToMesh(p, ips) {
      calls.push({ op: 'add', pod: p.metadata.name ?? '', ips });
      const f = addFailures.shift();
      if (f) throw f;
      held.add(p.metadata.uid ?? '');
      // The real dataplane annotates through the API; the watch brings the update back.
      pods.upsert({
        ...p,
        metadata: { ...p.metadata, annotations: { ...p.metadata.annotations, 'ambient.istio.io/redirection': 'enabled' } },
      });
    },
    async removePodFromMesh(p, isDelete) {
      calls.push({
        op: 'remove',
        pod: p.metadata.name ?? '',
        isDelete,
        annotation: annotation(p),
        ips: (p.status?.podIPs ?? []).map((x) => x.ip),
      });
      const f = removeFailures.shift();
      if (f) throw f;
      held.delete(p.metadata.uid ?? '');
      const current = pods.get(p.metadata.namespace, p.metadata.name ?? '');
      if (current && !isDelete) pods.upsert({ ...current, metadata: { ...current.metadata, annotations: {} } });
    },
    async syncPodIps(p, ips) {
      calls.push({ op: 'sync', pod: p.metadata.name ?? '', ips });
    },
    async replaceNetns() {},
    holdsNetns: (uid) => held.has(uid),
  };
  const view: ClusterView = {
    getPod: (n, name) => pods.get(n, name),
    getNamespace: (name) => namespaces.get(undefined, name),
    listPods: () => pods.list(),
    isSynced: () => true,
    onPodChange: (h) => pods.onChange(h),
    onNamespaceChange: (h) => namespaces.onChange(h),
  };
  const reconciler = createAmbientReconciler({
    view,
    dataplane,
    policy: {
      selectors: DEFAULT_ENABLEMENT_SELECTORS,
      excludeNamespaces: opts.exclude ?? ['kube-system'],
      systemNamespace: 'istio-system',
    },
    logger,
    queue: { retryDelayMs: 1, maxRetryDelayMs: 4 },
  });
  return { pods, namespaces, calls, reconciler, settle: () => reconciler.queue.idle() };
}

describe('ambient reconciliation (upstream informers_test.go cases)', () => {
  it('enrols an existing pod when its namespace is labelled, with every IP (dual stack)', async () => {
    const h = setup();
    h.namespaces.upsert(ns('default'));
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5', 'fd00::5'] }));
    await h.settle();
    assert.deepEqual(h.calls, []);
    h.namespaces.upsert(ns('default', AMBIENT));
    await h.settle();
    assert.deepEqual(h.calls, [{ op: 'add', pod: 'web', ips: ['10.0.0.5', 'fd00::5'] }]);
  });

  it('retries a retryable add error until it succeeds', async () => {
    const h = setup({ failAdd: [new RetryableError('no ztunnel connection'), new RetryableError('no ztunnel connection')] });
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], labels: AMBIENT }));
    h.namespaces.upsert(ns('default'));
    await h.settle();
    assert.equal(h.calls.filter((c) => c.op === 'add').length, 3);
    assert.equal(h.pods.get('default', 'web')?.metadata.annotations?.['ambient.istio.io/redirection'], 'enabled');
  });

  it('does not retry a non-retryable add error', async () => {
    const h = setup({ failAdd: [new NonRetryableError('netns not found')] });
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], labels: AMBIENT }));
    h.namespaces.upsert(ns('default'));
    await h.settle();
    assert.equal(h.calls.length, 1);
  });

  it("does not retry a refused netns (the node's own found for the pod)", async () => {
    const h = setup({ failAdd: [new PodNetnsRefusedError('/host/proc/1/ns/net', "it is the node's own network namespace")] });
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], labels: AMBIENT }));
    h.namespaces.upsert(ns('default'));
    await h.settle();
    assert.equal(h.calls.length, 1);
  });

  it('skips a pod without an IP and enrols it once it has one', async () => {
    const h = setup();
    h.reconciler.start();
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web'));
    h.pods.upsert(pod('web'));
    await h.settle();
    assert.deepEqual(h.calls, []);
    h.pods.upsert(pod('web', { ips: ['10.0.0.7'] }));
    await h.settle();
    assert.deepEqual(h.calls, [{ op: 'add', pod: 'web', ips: ['10.0.0.7'] }]);
  });

  it('never enrols a host-network pod', async () => {
    const h = setup();
    h.reconciler.start();
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('hn', { ips: ['192.168.0.2'], hostNetwork: true }));
    h.pods.upsert(pod('hn', { ips: ['192.168.0.2'], hostNetwork: true }));
    await h.settle();
    assert.deepEqual(h.calls, []);
  });

  it('removes an enrolled pod when its namespace is unlabelled, retrying failures', async () => {
    const h = setup({ failRemove: [new Error('ztunnel did not ack')] });
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.reconciler.start();
    h.namespaces.upsert(ns('default'));
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => `${c.op}:${c.isDelete}`),
      ['remove:false', 'remove:false'],
    );
  });

  it('removes an enrolled pod whose label opts it out', async () => {
    const h = setup();
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled', labels: { 'istio.io/dataplane-mode': 'none' } }));
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => c.op),
      ['remove'],
    );
  });

  it('removes a terminated Job pod using the old object (which still has its IPs), even with retries', async () => {
    const h = setup({ failRemove: [new Error('api hiccup')] });
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('job', { ips: ['10.0.0.9'], annotation: 'enabled' }));
    h.reconciler.start();
    h.pods.upsert(pod('job', { annotation: 'enabled', phase: 'Succeeded' }));
    await h.settle();
    const removes = h.calls.filter((c) => c.op === 'remove');
    assert.ok(removes.length >= 2);
    assert.deepEqual(removes[0], { op: 'remove', pod: 'job', isDelete: true, annotation: 'enabled', ips: ['10.0.0.9'] });
  });

  it('an update of an enrolled pod before its namespace reaches the cache removes nothing; the namespace decides when it arrives', async () => {
    const h = setup({ held: ['uid-web', 'uid-api'] });
    h.reconciler.start();
    // The CNI ADD enrolled them reading the namespace directly; the namespace watch lags the pods'.
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.pods.upsert(pod('api', { ns: 'other', ips: ['10.0.1.5'], annotation: 'enabled' }));
    h.pods.upsert(pod('api', { ns: 'other', ips: ['10.0.1.5'], annotation: 'enabled' }));
    await h.settle();
    assert.equal(h.calls.length, 0, 'nothing decided without the namespace');
    h.namespaces.upsert(ns('default', AMBIENT));
    h.namespaces.upsert(ns('other'));
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => `${c.op} ${c.pod}`),
      ['remove api'],
      'the labelled namespace keeps its pod, the unlabelled one has it removed',
    );
  });

  it('a pod deleted before its namespace reached the cache is still cleaned up when this agent holds its netns', async () => {
    const h = setup({ held: ['uid-web'] });
    h.reconciler.start();
    h.reconciler.queue.add({ type: 'delete', namespace: 'default', name: 'web', pod: pod('web', { ips: ['10.0.0.5'] }) });
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => `${c.op} ${c.pod} ${c.isDelete}`),
      ['remove web true'],
    );
  });

  it('ignores stale update events for a pod already enrolled', async () => {
    const h = setup({ held: ['uid-web'] });
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.reconciler.start();
    h.reconciler.queue.add({ type: 'update', namespace: 'default', name: 'web', old: pod('web', { ips: ['10.0.0.5'] }) });
    await h.settle();
    assert.deepEqual(h.calls, []);
  });

  it('skips an update for a vanished pod but still handles its delete', async () => {
    const h = setup();
    h.namespaces.upsert(ns('default', AMBIENT));
    h.reconciler.start();
    const gone = pod('gone', { ips: ['10.0.0.4'], annotation: 'enabled' });
    h.reconciler.queue.add({ type: 'update', namespace: 'default', name: 'gone', old: undefined });
    await h.settle();
    assert.equal(h.calls.length, 0);
    h.reconciler.queue.add({ type: 'delete', namespace: 'default', name: 'gone', pod: gone });
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => `${c.op}:${c.isDelete}`),
      ['remove:true'],
    );
  });

  it('re-asserts the probe set only when an enrolled pod changes IPs', async () => {
    const h = setup({ held: ['uid-web'] });
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    await h.settle();
    assert.deepEqual(h.calls, []);
    h.pods.upsert(pod('web', { ips: ['10.0.0.6'], annotation: 'enabled' }));
    await h.settle();
    assert.deepEqual(h.calls, [{ op: 'sync', pod: 'web', ips: ['10.0.0.6'] }]);
  });

  it('enrols again a pod annotated as enrolled whose netns it does not hold (a reboot): at the start-up resync and on its updates', async () => {
    const h = setup({ failAdd: [new NonRetryableError("failed to open the pod's network namespace: no process of the pod found")] });
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' }));
    h.reconciler.start();
    h.reconciler.resyncAll();
    await h.settle();
    assert.deepEqual(h.calls, [{ op: 'add', pod: 'web', ips: ['10.0.0.5'] }], 'its sandbox is not back yet: one attempt');
    h.pods.upsert(pod('web', { ips: ['10.0.0.7'], annotation: 'enabled' }));
    await h.settle();
    assert.deepEqual(h.calls.slice(1), [{ op: 'add', pod: 'web', ips: ['10.0.0.7'] }], "the new sandbox's status update enrols it");
    h.pods.upsert(pod('web', { ips: ['10.0.0.7'], annotation: 'enabled', phase: 'Running' }));
    await h.settle();
    assert.equal(h.calls.length, 2, 'held from then on: nothing more');
  });

  it('does not enrol again a pod being deleted, whatever its annotation says', async () => {
    const h = setup();
    h.namespaces.upsert(ns('default', AMBIENT));
    const deleting = pod('web', { ips: ['10.0.0.5'], annotation: 'enabled' });
    h.pods.upsert(deleting);
    h.reconciler.start();
    h.pods.upsert({ ...deleting, metadata: { ...deleting.metadata, deletionTimestamp: '2026-12-02T00:00:00Z' } });
    await h.settle();
    assert.deepEqual(h.calls, []);
  });

  describe('excluded namespaces', () => {
    it('never enrols a pod labelled for ambient there', async () => {
      const h = setup({ exclude: ['kube-system'] });
      h.reconciler.start();
      h.namespaces.upsert(ns('kube-system', AMBIENT));
      h.pods.upsert(pod('dns', { ns: 'kube-system', ips: ['10.0.0.2'], labels: AMBIENT }));
      h.pods.upsert(pod('dns', { ns: 'kube-system', ips: ['10.0.0.2'], labels: AMBIENT }));
      await h.settle();
      assert.deepEqual(h.calls, []);
    });

    it('removes a pod enrolled there before the exclusion, and still cleans up on delete', async () => {
      const h = setup({ exclude: ['kube-system'] });
      h.namespaces.upsert(ns('kube-system', AMBIENT));
      const enrolled = pod('dns', { ns: 'kube-system', ips: ['10.0.0.2'], annotation: 'enabled' });
      h.pods.upsert(enrolled);
      h.reconciler.start();
      h.pods.upsert(enrolled);
      await h.settle();
      assert.deepEqual(
        h.calls.map((c) => `${c.op}:${c.isDelete}`),
        ['remove:false'],
      );
      h.pods.delete(pod('dns', { ns: 'kube-system', ips: ['10.0.0.2'], annotation: 'enabled' }));
      await h.settle();
      assert.deepEqual(
        h.calls.map((c) => `${c.op}:${c.isDelete}`),
        ['remove:false', 'remove:true'],
      );
    });
  });

  it('does not re-enqueue ztunnel pods on namespace events', async () => {
    const h = setup();
    h.pods.upsert(pod('ztunnel-x', { ns: 'istio-system', ips: ['10.0.0.3'], labels: { app: 'ztunnel', ...AMBIENT } }));
    h.reconciler.start();
    h.namespaces.upsert(ns('istio-system', AMBIENT));
    await h.settle();
    assert.deepEqual(h.calls, []);
  });

  it('a pending pod is enrolled again', async () => {
    const h = setup();
    h.namespaces.upsert(ns('default', AMBIENT));
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'pending' }));
    h.reconciler.start();
    h.pods.upsert(pod('web', { ips: ['10.0.0.5'], annotation: 'pending' }));
    await h.settle();
    assert.deepEqual(
      h.calls.map((c) => c.op),
      ['add'],
    );
  });
});
