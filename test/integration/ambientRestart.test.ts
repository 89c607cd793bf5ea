/**
 * Ambient restart (root, real kernel): the ambient agent's state across ztunnel reconnects and a
 * `kill -9` of `dist/install-cni` (running in a scratch node netns, pods with real pause processes
 * in kubepods cgroups so the agent's procfs scan finds them), and un-enrolment when the namespace
 * loses its label. After each disturbance the probe set, the agent's pod cache (as the next
 * ztunnel snapshot shows it) and ztunnel's view must agree with the pods that exist.
 */
import { AMBIENT_BACKENDS, ambientSuite } from '../support/ambientSuite.ts';
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import {
  assertNoDuplicateRules as assertNoDuplicates,
  freshSnapshot as freshSnapshotOf,
  waitUntil,
} from '../support/ambientConvergence.ts';
import { probeSetEntries } from '../support/ambientNodeState.ts';
import { attachmentOf, type AmbientRig } from '../support/ambientRig.ts';
import type { FakeZtunnel } from '../support/fakeZtunnel.ts';
import { namespaceObject } from '../support/meshPods.ts';
import { ANY_ISTIO_STATE, netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';

const NS = 'amb-restart';
const REDIRECTION = 'ambient.istio.io/redirection';

const sorted = (uids: Iterable<string>) => [...uids].sort();

const backends = AMBIENT_BACKENDS;

for (const backend of backends)
  describe(`ambient agent: ztunnel reconnects, kill -9 and restart, namespace unlabel [${backend.name}]`, {
    skip: kernelSkip,
    timeout: 300_000,
  }, () => {
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const pods = new Map<string, PodSandbox>();
    let nextIndex = 0;

    const suite = ambientSuite(NS, backend, pods);
    before(() => ({ node, rig, ztunnel } = suite()));

    const newPod = async (): Promise<PodSandbox> => {
      const i = nextIndex++;
      const s = await node.addPod(NS, `app-${i}`, i);
      pods.set(s.uid, s);
      rig.api.upsertPod(ambientPodObject(s));
      return s;
    };
    const add = (s: PodSandbox) => rig.exec('ADD', rig.api.getPod(NS, s.name)!, attachmentOf(s));
    const annotation = (s: PodSandbox) => rig.api.getPod(NS, s.name)?.metadata.annotations?.[REDIRECTION];
    const deletePod = async (s: PodSandbox) => {
      rig.api.deletePod(NS, s.name);
      pods.delete(s.uid);
      await s.remove();
    };
    const state = async () =>
      [
        `pods: ${[...pods.values()].map((p) => `${p.name}=${p.uid}:${annotation(p)}`).join(' ')}`,
        `probe set: ${JSON.stringify(await probeSetEntries(node.netns.path, backend.sets))}`,
        `ztunnel known: ${sorted(ztunnel.known).join(' ')}`,
        `ztunnel log: ${ztunnel.log.slice(-40).join(', ')}`,
        `fd problems: ${ztunnel.fdProblems.join('; ')}`,
      ].join('\n');
    /** Everything agrees with `pods`: annotations, probe set, ztunnel's view, netns fds. */
    const converged = async () => {
      const want = sorted(pods.keys());
      if (![...pods.values()].every((p) => annotation(p) === 'enabled')) return false;
      const entries = await probeSetEntries(node.netns.path, backend.sets);
      if (JSON.stringify(sorted(entries.map((e) => e.uid))) !== JSON.stringify(want)) return false;
      if (!entries.every((e) => pods.get(e.uid)?.ip === e.ip)) return false;
      return JSON.stringify(sorted(ztunnel.known)) === JSON.stringify(want);
    };
    const freshSnapshot = () => freshSnapshotOf(ztunnel);
    const assertNoDuplicateRules = () => assertNoDuplicates(pods.values(), node.netns.path, backend.name);

    it('ztunnel dropping mid-stream (during updates, then during a snapshot) loses nothing', async () => {
      const first = await Promise.all([newPod(), newPod(), newPod()]);
      for (const p of first) assert.equal((await add(p)).code, 0);
      const more = await Promise.all([newPod(), newPod(), newPod(), newPod()]);
      // The peer disappears instead of acking the add of one of the new pods.
      const victim = more[1] as PodSandbox;
      let dropped = false;
      ztunnel.dropOn = (req) => {
        if (dropped || !('add' in req) || req.add.uid !== victim.uid) return false;
        dropped = true;
        return true;
      };
      const results = await Promise.all(more.map(add));
      ztunnel.dropOn = undefined;
      assert.ok(dropped);
      const victimResult = results[1];
      assert.notEqual(victimResult?.code, 0, 'the pod whose add was never acked is refused');
      assert.equal((JSON.parse(victimResult?.stdout ?? '{}') as { code?: number }).code, 11, victimResult?.stdout);
      const enrolledBefore = [...first, ...more].filter((p) => annotation(p) === 'enabled').map((p) => p.uid);

      const snap = await freshSnapshot();
      assert.deepEqual(snap.keeps, [], 'every cached pod has its netns');
      for (const uid of enrolledBefore)
        assert.ok(
          snap.adds.some((a) => a.uid === uid),
          `snapshot lost ${uid}\n${await state()}`,
        );
      assert.deepEqual(ztunnel.fdProblems, []);
      // The runtime retries the refused sandboxes.
      for (const [i, r] of results.entries()) if (r.code !== 0) assert.equal((await add(more[i] as PodSandbox)).code, 0);
      await waitUntil('convergence after the update-time drop', converged, state);

      // Now drop during the snapshot of the next connection: the one after that is complete again.
      let seen = 0;
      ztunnel.dropOn = (req) => 'add' in req && ++seen === 3;
      await ztunnel.reconnect();
      await ztunnel.waitFor(() => !ztunnel.connected, 'the drop during the snapshot');
      ztunnel.dropOn = undefined;
      const again = await freshSnapshot();
      assert.deepEqual(sorted(again.adds.map((a) => a.uid)), sorted(pods.keys()), await state());
      for (const a of again.adds) assert.equal(a.inode, pods.get(a.uid)?.inode);
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.ok(await converged(), await state());
      await assertNoDuplicateRules();
    });

    it('kill -9 during enrolments: after the restart the probe set, the cache and ztunnel agree with the pods that exist', async () => {
      const enrolledEarlier = [...pods.values()];
      const inFlight = await Promise.all([newPod(), newPod(), newPod(), newPod(), newPod()]);
      ztunnel.ackDelayMs = 150;
      const adds = inFlight.map(add);
      await ztunnel.waitFor(() => ztunnel.adds.some((a) => inFlight.some((p) => p.uid === a.uid)), 'an in-flight add');
      assert.equal(await rig.daemon.stop('SIGKILL'), null, 'killed by the signal');
      const results = await Promise.all(adds);
      assert.ok(
        results.some((r) => r.code !== 0),
        'at least one ADD was cut short by the kill',
      );
      for (const r of results.filter((x) => x.code !== 0)) {
        // Fails closed with "try again later" (degraded mode refuses ambient pods); the runtime retries.
        assert.equal((JSON.parse(r.stdout) as { code?: number }).code, 11, `a cut-short ADD prints a retryable CNI error: ${r.stdout}`);
      }
      ztunnel.ackDelayMs = 0;
      await ztunnel.waitFor(() => !ztunnel.connected, 'ztunnel noticing the agent is gone');
      // While the agent is down, one enrolled pod and one in-flight pod are deleted for good.
      const goneEnrolled = enrolledEarlier[0] as PodSandbox;
      const goneInFlight = inFlight[0] as PodSandbox;
      await deletePod(goneEnrolled);
      await deletePod(goneInFlight);

      // The agent's start-up snapshot: the pods annotated `enabled` (nothing changes them while it is down).
      const enabledAtRestart = [...pods.values()].filter((p) => annotation(p) === 'enabled');
      await rig.startDaemon();
      const snap = await freshSnapshot();
      // Pods the informer is enrolling right now may be sent as Keep (cached, netns not attached yet).
      for (const p of enabledAtRestart)
        assert.ok(!snap.keeps.includes(p.uid), `netns of enrolled ${p.name} found in procfs\n${await state()}`);
      const snapUids = snap.adds.map((a) => a.uid);
      for (const gone of [goneEnrolled.uid, goneInFlight.uid])
        assert.ok(!snapUids.includes(gone) && !snap.keeps.includes(gone), 'deleted pods are not in the cache');
      for (const a of snap.adds) assert.equal(a.inode, pods.get(a.uid)?.inode, `snapshot fd of ${a.uid} is its pod's netns`);
      // The pods annotated before the kill are in the snapshot; the rest are enrolled by the informer (procfs).
      for (const p of enabledAtRestart) assert.ok(snapUids.includes(p.uid), `${p.name} in the snapshot`);
      await waitUntil('convergence after the restart', converged, state);
      const entries = await probeSetEntries(node.netns.path, backend.sets);
      assert.ok(!entries.some((e) => e.uid === goneEnrolled.uid || e.uid === goneInFlight.uid), 'no leaked probe-set entries');

      // The runtime's retries of ADDs cut short by the kill are harmless now.
      for (const [i, r] of results.entries()) {
        const p = inFlight[i] as PodSandbox;
        if (r.code !== 0 && pods.has(p.uid)) assert.equal((await add(p)).code, 0, `retry of ${p.name}`);
      }
      const last = await freshSnapshot();
      assert.deepEqual(sorted(last.adds.map((a) => a.uid)), sorted(pods.keys()), 'the cache holds exactly the existing pods');
      assert.deepEqual(last.keeps, []);
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.ok(await converged(), await state());
      await assertNoDuplicateRules();
    });

    it('unlabelling the namespace removes every pod: Del to ztunnel, probe-set entry, in-pod rules, annotation', async () => {
      const members = [...pods.values()];
      assert.ok(members.length > 0);
      rig.api.upsertNamespace(namespaceObject(NS));
      await waitUntil(
        'every pod un-enrolled',
        async () =>
          members.every((p) => annotation(p) === undefined && ztunnel.dels.includes(p.uid)) &&
          (await probeSetEntries(node.netns.path, backend.sets)).length === 0,
        state,
      );
      assert.deepEqual(sorted(ztunnel.known), []);
      for (const p of members) assert.doesNotMatch(await netnsRuleset(p.netns.path), ANY_ISTIO_STATE, `in-pod rules of ${p.name} removed`);
      const snap = await freshSnapshot();
      assert.deepEqual(snap.adds, [], 'the agent cache is empty');
      assert.deepEqual(snap.keeps, []);
    });
  });
