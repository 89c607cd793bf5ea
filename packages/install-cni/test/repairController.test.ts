import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { createJsonLogger } from '@istio-cni/handoff';
import { ObjectStore } from '../src/kube/clusterView.ts';
import type { RepairApi } from '../src/repair/repairApi.ts';
import { createRepairController, repairMode, type RepairMode } from '../src/repair/repairController.ts';
import { createRepairMetrics } from '../src/repair/repairMetrics.ts';
import { podKey, type RepairPod } from '../src/repair/repairPod.ts';
import {
  DIED,
  brokenPodNoAnnotation,
  brokenPodTerminating,
  brokenPodWaiting,
  filter,
  workingPod,
  workingPodDiedPreviously,
} from './repairFixtures.ts';

interface FakeApi extends RepairApi {
  /** The "server's" pods, by key. */
  pods: Map<string, RepairPod>;
  calls: string[];
  events: { pod: string; type: string; reason: string; message: string }[];
  failNext: Partial<Record<'delete' | 'label' | 'event', Error>>;
}

function fakeApi(pods: RepairPod[]): FakeApi {
  const api: FakeApi = {
    pods: new Map(pods.map((p) => [podKey(p), p])),
    calls: [],
    events: [],
    failNext: {},
    async deletePod(pod) {
      api.calls.push(`delete ${podKey(pod)} uid=${pod.metadata.uid} rv=${pod.metadata.resourceVersion}`);
      const err = api.failNext.delete;
      delete api.failNext.delete;
      if (err) throw err;
      const stored = api.pods.get(podKey(pod));
      if (!stored) throw new Error(`pods "${pod.metadata.name}" not found`);
      if (stored.metadata.uid !== pod.metadata.uid || stored.metadata.resourceVersion !== pod.metadata.resourceVersion) {
        throw new Error('Operation cannot be fulfilled: precondition failed');
      }
      api.pods.delete(podKey(pod));
    },
    async labelPod(pod, key, value) {
      api.calls.push(`label ${podKey(pod)} ${key}=${value}`);
      const err = api.failNext.label;
      delete api.failNext.label;
      if (err) throw err;
      const stored = api.pods.get(podKey(pod));
      if (!stored) throw new Error('not found');
      api.pods.set(podKey(pod), { ...stored, metadata: { ...stored.metadata, labels: { ...stored.metadata.labels, [key]: value } } });
    },
    async recordEvent(pod, type, reason, message) {
      const err = api.failNext.event;
      delete api.failNext.event;
      if (err) throw err;
      api.events.push({ pod: podKey(pod), type, reason, message });
    },
  };
  return api;
}

interface Harness {
  api: FakeApi;
  cache: ObjectStore<RepairPod>;
  repaired: string[];
  registry: Registry;
  logs: Record<string, unknown>[];
  controller: ReturnType<typeof createRepairController>;
  count(type: string, result: string): Promise<number>;
}

function harness(
  mode: RepairMode,
  pods: RepairPod[],
  opts: { repairFails?: number; labelKey?: string; labelValue?: string; f?: Parameters<typeof filter>[0] } = {},
): Harness {
  const api = fakeApi(pods);
  const cache = new ObjectStore<RepairPod>();
  const repaired: string[] = [];
  const registry = new Registry();
  const logs: Record<string, unknown>[] = [];
  let repairFails = opts.repairFails ?? 0;
  const controller = createRepairController({
    mode,
    filter: filter({ initContainerTerminationMessage: DIED, ...opts.f }),
    labelKey: opts.labelKey ?? 'testkey',
    labelValue: opts.labelValue ?? 'testval',
    api,
    repairInPlace: async (pod) => {
      if (repairFails > 0) {
        repairFails--;
        throw new Error('no network namespace on this node holds pod IP "10.1.1.1"');
      }
      repaired.push(`${podKey(pod)}@${pod.metadata.uid}`);
      return '/proc/1234/ns/net';
    },
    getPod: (key) => {
      const i = key.indexOf('/');
      return cache.get(key.slice(0, i), key.slice(i + 1));
    },
    metrics: createRepairMetrics(registry),
    logger: createJsonLogger({ scope: 'test', threshold: 'debug', sink: (l) => logs.push(JSON.parse(l) as Record<string, unknown>) }),
    queue: { retryDelayMs: 1, maxRetryDelayMs: 2 },
  });
  cache.onChange((_t, pod) => controller.podChanged(pod));
  return {
    api,
    cache,
    repaired,
    registry,
    logs,
    controller,
    async count(type, result) {
      const metric = await registry.getSingleMetric('istio_cni_repair_pods_repaired_total')?.get();
      return metric?.values.find((v) => v.labels.type === type && v.labels.result === result)?.value ?? 0;
    },
  };
}

async function feed(h: Harness, pods: RepairPod[]): Promise<void> {
  for (const p of pods) h.cache.upsert(p);
  await h.controller.idle();
}

function labelsOf(api: FakeApi): Record<string, string> {
  return Object.fromEntries(
    [...api.pods.values()].map((p) => [
      p.metadata.name ?? '',
      Object.entries(p.metadata.labels ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
    ]),
  );
}

describe('repair mode precedence', () => {
  it('repair in place wins over delete, which wins over label', () => {
    assert.equal(repairMode({ repairPods: true, deletePods: true, labelPods: true }), 'repair');
    assert.equal(repairMode({ repairPods: false, deletePods: true, labelPods: true }), 'delete');
    assert.equal(repairMode({ repairPods: false, deletePods: false, labelPods: true }), 'label');
    assert.equal(repairMode({ repairPods: false, deletePods: false, labelPods: false }), undefined);
  });
});

describe('label mode', () => {
  it('no broken pods: nothing labelled, nothing counted', async () => {
    const pods = [workingPod, workingPodDiedPreviously];
    const h = harness('label', pods);
    await feed(h, pods);
    assert.deepEqual(labelsOf(h.api), { WorkingPod: '', WorkingPodDiedPreviously: '' });
    assert.deepEqual(h.api.calls, []);
    assert.equal(await h.count('label', 'success'), 0);
  });

  it('broken pods: only the broken one is labelled through pods/status, with an event', async () => {
    const pods = [workingPod, workingPodDiedPreviously, brokenPodWaiting, brokenPodNoAnnotation];
    const h = harness('label', pods);
    await feed(h, pods);
    assert.deepEqual(labelsOf(h.api), {
      WorkingPod: '',
      WorkingPodDiedPreviously: '',
      BrokenPodWaiting: 'testkey=testval',
      BrokenPodNoAnnotation: '',
    });
    assert.deepEqual(h.api.calls, ['label default/BrokenPodWaiting testkey=testval']);
    assert.deepEqual(h.api.events, [
      { pod: 'default/BrokenPodWaiting', type: 'Warning', reason: 'LabelBrokenPod', message: 'pod detected as broken, labeled' },
    ]);
    assert.equal(await h.count('label', 'success'), 1);
  });

  it('already labelled pod: skipped and counted once as skip', async () => {
    const pods = [workingPod, workingPodDiedPreviously, brokenPodTerminating];
    const h = harness('label', pods, { labelKey: 'testlabel', labelValue: 'true' });
    await feed(h, pods);
    await feed(h, [{ ...brokenPodTerminating, metadata: { ...brokenPodTerminating.metadata, resourceVersion: '8' } }]);
    assert.deepEqual(h.api.calls, []);
    assert.deepEqual(labelsOf(h.api).BrokenPodTerminating, 'testlabel=true');
    assert.equal(await h.count('label', 'skip'), 1);
    assert.equal(await h.count('label', 'success'), 0);
  });

  it('a failed patch is counted, reported in an event, and retried', async () => {
    const h = harness('label', [brokenPodWaiting]);
    h.api.failNext.label = new Error('pods "BrokenPodWaiting" is forbidden');
    await feed(h, [brokenPodWaiting]);
    assert.equal(h.api.calls.length, 2);
    assert.equal(await h.count('label', 'fail'), 1);
    assert.equal(await h.count('label', 'success'), 1);
    assert.match(h.api.events[0]?.message ?? '', /failed to label: pods "BrokenPodWaiting" is forbidden/);
    const err = h.logs.find((l) => l.level === 'error');
    assert.equal(err?.pod, 'default/BrokenPodWaiting');
  });
});

describe('delete mode', () => {
  it('no broken pods: nothing deleted', async () => {
    const pods = [workingPod, workingPodDiedPreviously];
    const h = harness('delete', pods);
    await feed(h, pods);
    assert.deepEqual([...h.api.pods.keys()], ['default/WorkingPod', 'default/WorkingPodDiedPreviously']);
    assert.equal(await h.count('delete', 'success'), 0);
  });

  it('broken pods: deleted with UID and resourceVersion preconditions, once', async () => {
    const pods = [workingPod, workingPodDiedPreviously, brokenPodWaiting];
    const h = harness('delete', pods);
    await feed(h, pods);
    // The pod lingers in the cache while it terminates; updates for the same UID do nothing.
    await feed(h, [{ ...brokenPodWaiting, metadata: { ...brokenPodWaiting.metadata, resourceVersion: '9' } }]);
    assert.deepEqual([...h.api.pods.keys()], ['default/WorkingPod', 'default/WorkingPodDiedPreviously']);
    assert.deepEqual(h.api.calls, ['delete default/BrokenPodWaiting uid=uid-BrokenPodWaiting rv=7']);
    assert.deepEqual(
      h.api.events.map((e) => `${e.type} ${e.reason} ${e.message}`),
      ['Warning DeleteBrokenPod pod detected as broken, deleted'],
    );
    assert.equal(await h.count('delete', 'success'), 1);
  });

  it('a stale resourceVersion fails the precondition; the retry uses the newest copy', async () => {
    const stale = brokenPodWaiting;
    const fresh: RepairPod = { ...stale, metadata: { ...stale.metadata, resourceVersion: '8' } };
    const h = harness('delete', [fresh]);
    const deletePod = h.api.deletePod;
    h.api.deletePod = async (pod) => {
      try {
        await deletePod(pod);
      } finally {
        h.cache.upsert(fresh); // the watch delivers the newer copy
      }
    };
    await feed(h, [stale]);
    assert.equal(await h.count('delete', 'fail'), 1);
    assert.equal(await h.count('delete', 'success'), 1);
    assert.deepEqual(h.api.calls, [
      'delete default/BrokenPodWaiting uid=uid-BrokenPodWaiting rv=7',
      'delete default/BrokenPodWaiting uid=uid-BrokenPodWaiting rv=8',
    ]);
  });

  it('terminating pods are left alone', async () => {
    const terminating: RepairPod = {
      ...brokenPodWaiting,
      metadata: { ...brokenPodWaiting.metadata, deletionTimestamp: '2024-01-01T00:00:00Z' },
    };
    const h = harness('delete', [terminating]);
    await feed(h, [terminating]);
    assert.deepEqual(h.api.calls, []);
  });
});

describe('repair in place', () => {
  it('no broken pods: nothing repaired', async () => {
    const pods = [workingPod, workingPodDiedPreviously, brokenPodNoAnnotation];
    const h = harness('repair', pods);
    await feed(h, pods);
    assert.deepEqual(h.repaired, []);
    assert.equal(await h.count('repair', 'success'), 0);
  });

  it('broken pod: repaired once per UID, with an event, however many updates follow', async () => {
    const h = harness('repair', [brokenPodWaiting]);
    await feed(h, [brokenPodWaiting]);
    for (const rv of ['8', '9', '10'])
      await feed(h, [{ ...brokenPodWaiting, metadata: { ...brokenPodWaiting.metadata, resourceVersion: rv } }]);
    assert.deepEqual(h.repaired, ['default/BrokenPodWaiting@uid-BrokenPodWaiting']);
    assert.deepEqual(
      h.api.events.map((e) => e.reason),
      ['RepairBrokenPod'],
    );
    assert.equal(await h.count('repair', 'success'), 1);
    assert.deepEqual(h.api.calls, [], 'repair in place neither deletes nor labels');
  });

  it('UID changed under the same name: the new pod is repaired too', async () => {
    const h = harness('repair', []);
    await feed(h, [brokenPodWaiting]);
    const recreated: RepairPod = { ...brokenPodWaiting, metadata: { ...brokenPodWaiting.metadata, uid: 'uid-second' } };
    await feed(h, [recreated, recreated]);
    assert.deepEqual(h.repaired, ['default/BrokenPodWaiting@uid-BrokenPodWaiting', 'default/BrokenPodWaiting@uid-second']);
    assert.ok(h.logs.some((l) => l.level === 'warn' && l.previousUid === 'uid-BrokenPodWaiting' && l.uid === 'uid-second'));
  });

  it('deleted then re-created: the record is forgotten with the pod', async () => {
    const h = harness('repair', []);
    await feed(h, [brokenPodWaiting]);
    h.cache.delete(brokenPodWaiting);
    await h.controller.idle();
    await feed(h, [brokenPodWaiting]);
    assert.equal(h.repaired.length, 2);
    assert.ok(!h.logs.some((l) => l.level === 'warn'), 'a seen deletion is not a surprise');
  });

  it('a failing repair is retried, counted per attempt, and the pod is repaired when it works', async () => {
    const h = harness('repair', [], { repairFails: 2 });
    await feed(h, [brokenPodWaiting]);
    assert.deepEqual(h.repaired, ['default/BrokenPodWaiting@uid-BrokenPodWaiting']);
    assert.equal(await h.count('repair', 'fail'), 2);
    assert.equal(await h.count('repair', 'success'), 1);
    assert.deepEqual(
      h.api.events.map((e) => e.message.replace(/:.*/, '')),
      [
        'pod detected as broken, but failed to repair',
        'pod detected as broken, but failed to repair',
        'pod detected as broken, traffic capture programmed in place',
      ],
    );
  });

  it('gives up after 5 attempts with an error naming the pod, and keeps running', async () => {
    const h = harness('repair', [], { repairFails: 100 });
    await feed(h, [brokenPodWaiting]);
    assert.equal(await h.count('repair', 'fail'), 5);
    const giveUp = h.logs.find((l) => l.msg === 'giving up on pod');
    assert.equal(giveUp?.pod, 'default/BrokenPodWaiting');
    assert.match(String(giveUp?.error), /holds pod IP/);
    // Still serving other pods afterwards (which fail the same way here).
    await feed(h, [{ ...brokenPodTerminating, metadata: { ...brokenPodTerminating.metadata, uid: 'u2' } }]);
    assert.equal(await h.count('repair', 'fail'), 10);
    assert.equal(h.logs.filter((l) => l.msg === 'giving up on pod').length, 2);
  });

  it('an event that cannot be written does not undo the repair', async () => {
    const h = harness('repair', []);
    h.api.failNext.event = new Error('events is forbidden');
    await feed(h, [brokenPodWaiting]);
    assert.equal(h.repaired.length, 1);
    assert.equal(await h.count('repair', 'success'), 1);
    assert.ok(h.logs.some((l) => l.level === 'warn' && l.msg === 'failed to record event' && l.pod === 'default/BrokenPodWaiting'));
  });
});
