/**
 * Repair controller, delete and label modes through the built daemon and the fake Kubernetes API: the real
 * client sends DELETE with UID + resourceVersion preconditions and a merge patch on `pods/status`,
 * and records Warning events from `cni-repair`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../support/fakeKubeApi.ts';
import { sidecarPod } from '../support/meshPods.ts';
import { startAgentRig } from '../support/startAgentRig.ts';

function brokenPod(name: string): KubeObject {
  const pod = sidecarPod('default', name);
  return {
    ...pod,
    status: {
      phase: 'Pending',
      podIP: '10.96.0.9',
      initContainerStatuses: [
        {
          name: 'istio-validation',
          ready: false,
          restartCount: 2,
          state: { waiting: { reason: 'CrashLoopBackOff' } },
          lastState: { terminated: { exitCode: 126, reason: 'Error', message: 'iptables validation failed' } },
        },
      ],
    },
  };
}

async function until(what: string, fn: () => boolean): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (fn()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const eventsFor = (events: KubeObject[], name: string) =>
  events.filter((e) => (e as { involvedObject?: { name?: string } }).involvedObject?.name === name) as unknown as {
    type: string;
    reason: string;
    message: string;
    source: { component: string };
  }[];

describe('repair controller: delete and label modes', { timeout: 60_000 }, () => {
  it('label mode labels the broken pod through pods/status, once', async (t) => {
    const rig = await startAgentRig({ REPAIR_ENABLED: 'true', REPAIR_LABEL_PODS: 'true' });
    t.after(() => rig.close());
    rig.api.upsertPod(sidecarPod('default', 'healthy-0'));
    rig.api.upsertPod(brokenPod('broken-0'));
    await until('the label', () => rig.api.getPod('default', 'broken-0')?.metadata.labels?.['cni.istio.io/uninitialized'] === 'true');
    await until('the event', () => eventsFor(rig.api.events, 'broken-0').length > 0);
    assert.ok(rig.api.requests.includes('PATCH /api/v1/namespaces/default/pods/broken-0/status'));
    assert.deepEqual(
      eventsFor(rig.api.events, 'broken-0').map((e) => [e.type, e.reason, e.message, e.source.component]),
      [['Warning', 'LabelBrokenPod', 'pod detected as broken, labeled', 'cni-repair']],
    );
    assert.equal(rig.api.getPod('default', 'healthy-0')?.metadata.labels?.['cni.istio.io/uninitialized'], undefined);
    assert.equal(rig.api.requests.filter((r) => r.startsWith('PATCH')).length, 1);
  });

  it('delete mode deletes the broken pod with preconditions', async (t) => {
    const rig = await startAgentRig({ REPAIR_ENABLED: 'true', REPAIR_DELETE_PODS: 'true' });
    t.after(() => rig.close());
    rig.api.upsertPod(sidecarPod('default', 'healthy-0'));
    rig.api.upsertPod(brokenPod('broken-1'));
    await until('the deletion', () => rig.api.getPod('default', 'broken-1') === undefined);
    await until('the event', () => eventsFor(rig.api.events, 'broken-1').length > 0);
    assert.deepEqual(
      eventsFor(rig.api.events, 'broken-1').map((e) => [e.type, e.reason, e.message]),
      [['Warning', 'DeleteBrokenPod', 'pod detected as broken, deleted']],
    );
    assert.ok(rig.api.getPod('default', 'healthy-0'));
    assert.deepEqual(
      rig.api.requests.filter((r) => r.startsWith('DELETE')),
      ['DELETE /api/v1/namespaces/default/pods/broken-1'],
    );
    const pre = (rig.api.deleteOptions[0] as { preconditions?: Record<string, string> }).preconditions;
    assert.equal(pre?.uid, 'uid-default-broken-1');
    assert.match(pre?.resourceVersion ?? '', /^\d+$/);
  });
});
