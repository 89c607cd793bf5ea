/**
 * A pod's sandbox re-created under the same UID with no ADD (root, real kernel): the runtime's new
 * netns gets a new pause process in the pod's cgroup, the old one's is killed. Continuous
 * verification (1 s) finds the pod's process in another netns than the one the agent holds and
 * enrols the new one (drift kind `netns_replaced`): in-pod rules there, ztunnel given it (the old
 * one deleted first), probe-set entries following the pod's IPs; the old netns is never touched.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ambientPodObject, type PodSandbox } from '../support/ambientNode.ts';
import { probeSetEntries } from '../support/ambientNodeState.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { ANY_ISTIO_STATE, netnsRuleset } from '../support/netnsRuleset.ts';
import { startVerifyingAmbient, until, type VerifyingAmbient } from '../support/verifyingAmbient.ts';

const NS = 'amb-sandbox';

for (const backend of [
  { name: 'iptables', env: {}, sets: 'ipset' as const },
  { name: 'nftables', env: { NATIVE_NFTABLES: 'true' }, sets: 'nft' as const },
])
  describe(`[ambient ${backend.name}] a sandbox re-created under the same UID without an ADD`, {
    skip: kernelSkip,
    timeout: 240_000,
  }, () => {
    let v: VerifyingAmbient;
    let programmed: string;
    let current: PodSandbox;

    before(async () => {
      v = await startVerifyingAmbient(NS, backend.env, backend.name === 'nftables');
      current = v.pod;
      programmed = await netnsRuleset(v.pod.netns.path);
    });
    after(async () => {
      await v?.close();
    });

    /** The pod's ztunnel adds and deletes so far. */
    const ztunnelSeen = () => ({
      adds: v.ztunnel.adds.filter((a) => a.uid === v.pod.uid).length,
      dels: v.ztunnel.dels.filter((u) => u === v.pod.uid).length,
    });

    /** The new sandbox enrolled: rules, ztunnel's latest Add with its netns after a Del, its IP alone in the probe set. */
    async function assertEnrolledIn(sandbox: PodSandbox, before: { adds: number; dels: number }): Promise<void> {
      assert.equal(await netnsRuleset(sandbox.netns.path), programmed, 'the in-pod rules of an ADD, in the new netns');
      const now = ztunnelSeen();
      assert.equal(now.dels, before.dels + 1, 'ztunnel told the pod in the old netns is gone');
      assert.equal(now.adds, before.adds + 1, 'and given the new one');
      assert.equal(v.ztunnel.adds.filter((a) => a.uid === v.pod.uid).at(-1)?.inode, sandbox.inode);
      assert.deepEqual(v.ztunnel.fdProblems, []);
      assert.deepEqual(await probeSetEntries(v.node.netns.path, backend.sets), [{ ip: sandbox.ip, uid: sandbox.uid }]);
    }

    it('same IP, old netns gone: the new netns is enrolled within an interval (netns_replaced, repaired)', async () => {
      const before = ztunnelSeen();
      current = await v.node.replaceSandbox(current);
      v.netnsOf.set(current.uid, current.netns.path);
      assert.notEqual(current.inode, v.pod.inode);
      assert.doesNotMatch(await netnsRuleset(current.netns.path), ANY_ISTIO_STATE, 'the new netns starts without rules');
      const line = await v.driftLine(`${NS}/${v.pod.name}`, 'netns_replaced');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      assert.match(JSON.stringify(line.drift), new RegExp(`inode ${v.pod.inode}\\b.*inode ${current.inode}\\b`));
      await assertEnrolledIn(current, before);
      assert.equal(await v.driftCount('netns_replaced', 'repaired'), 1);
    });

    it('new IP, old netns kept: reported while the API has the old IP, enrolled once it has the new one; the old netns untouched', async () => {
      const old = current;
      const oldRules = await netnsRuleset(old.netns.path);
      assert.equal(oldRules, programmed);
      const before = ztunnelSeen();
      current = await v.node.replaceSandbox(old, { index: 7, keepOld: true });
      v.netnsOf.set(current.uid, current.netns.path);
      // The API still says the old IP, which the new netns does not carry.
      const reported = await v.driftLine(`${NS}/${v.pod.name}`, 'netns_replaced', 'reported');
      assert.match(JSON.stringify(reported.drift), /carries none of its IPs in the API/);
      assert.equal(await v.driftCount('netns_replaced', 'reported'), 1);
      assert.doesNotMatch(await netnsRuleset(current.netns.path), ANY_ISTIO_STATE, 'not enrolled on the word of a cgroup alone');
      // kubelet reports the new sandbox's IP.
      const object = ambientPodObject(current);
      object.metadata.annotations = v.rig.api.getPod(NS, v.pod.name)?.metadata.annotations ?? {};
      v.rig.api.upsertPod(object);
      await until('the new netns enrolled', async () => (await netnsRuleset(current.netns.path)) === programmed);
      await until('ztunnel given the new netns', () => v.ztunnel.adds.filter((a) => a.uid === v.pod.uid).at(-1)?.inode === current.inode);
      await until(
        'the probe set following the IP',
        async () =>
          JSON.stringify(await probeSetEntries(v.node.netns.path, backend.sets)) === JSON.stringify([{ ip: current.ip, uid: current.uid }]),
      );
      await assertEnrolledIn(current, before);
      assert.equal(await netnsRuleset(old.netns.path), oldRules, 'the old netns is not touched');
    });
  });
