/**
 * An ambient pod that carries `ambient.istio.io/redirection=enabled` from before (a reboot) but whose
 * sandbox came back through an ADD that never reached the agent (istio-cni missing from the chain):
 * the agent must not trust the annotation. Root, real kernel: `dist/install-cni` with ambient on and
 * verification off, so only the informers act. The pod's status update finds its netns in /proc by
 * UID and IP and enrols it: in-pod rules, the host probe set and a ZDS Add with that netns.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createAmbientNode, ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { probeSetEntries } from '../support/ambientNodeState.ts';
import { startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from '../support/meshPods.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';

const NS = 'amb-stale';

describe('an ambient pod annotated as enrolled whose ADD never reached the agent', { skip: kernelSkip, timeout: 120_000 }, () => {
  let node: AmbientNode;
  let rig: AmbientRig;
  let ztunnel: FakeZtunnel;
  let pod: PodSandbox | undefined;

  before(async () => {
    node = createAmbientNode();
    rig = await startAmbientRig(node.netns.path, { VERIFY_INTERVAL: '0s' });
    await rig.startDaemon();
    rig.api.upsertNamespace(namespaceObject(NS, { [AMBIENT_LABEL]: 'ambient' }));
    ztunnel = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => (uid === pod?.uid ? pod.netns.path : undefined) });
    await ztunnel.waitFor(() => ztunnel.snapshots[0] === 1, 'the first snapshot');
  });
  after(async () => {
    await pod?.remove();
    ztunnel?.close();
    await rig?.close();
    await node?.remove();
  });

  it('is found by UID and IP and enrolled on its status update, not trusted', async () => {
    pod = await node.addPod(NS, 'app-0', 0);
    const object = ambientPodObject(pod);
    object.metadata.annotations = { 'ambient.istio.io/redirection': 'enabled' };
    const status = object.status as Record<string, unknown>;
    rig.api.upsertPod({ ...object, status: { ...status, phase: 'Pending' } });
    assert.doesNotMatch(await netnsRuleset(pod.netns.path), /ISTIO|istio/, 'nothing in the pod netns yet');
    rig.api.upsertPod(object);
    const line = await rig.daemon.waitForLog(
      (e) =>
        e.pod === `${NS}/app-0` &&
        e.msg === 'pod is annotated as enrolled but this agent holds no network namespace for it; enrolling it again',
      30_000,
    );
    assert.equal(line.annotation, 'enabled');
    await rig.daemon.waitForLog((e) => e.pod === `${NS}/app-0` && e.msg === 'pod enrolled in ambient mode', 30_000);
    assert.match(await netnsRuleset(pod.netns.path), /ISTIO_OUTPUT|istio-ambient/, 'in-pod rules programmed');
    assert.deepEqual(await probeSetEntries(node.netns.path, 'ipset'), [{ ip: pod.ip, uid: pod.uid }]);
    assert.equal(ztunnel.adds.filter((a) => a.uid === pod?.uid).length, 1, 'ztunnel was given its netns');
    assert.deepEqual(ztunnel.fdProblems, []);
  });
});
