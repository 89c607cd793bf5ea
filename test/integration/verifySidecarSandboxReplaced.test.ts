/**
 * A sidecar pod's sandbox re-created under the same UID with no ADD reaching the agent (root, real
 * kernel): the runtime's new netns gets a new pause process in the pod's cgroup, the old one's is
 * killed. Continuous verification (1 s) finds the pod running in a netns other than the one it was
 * added with, and captures it there once that netns carries the pod's IP (drift kind
 * `netns_replaced`); the attachment names the new netns from then on, and the old one is never
 * touched.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import type { PodSandbox } from '../support/ambientNode.ts';
import { attachmentOf } from '../support/ambientRig.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { namespaceObject, sidecarPod } from '../support/meshPods.ts';
import { ANY_ISTIO_STATE, CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import { inNetns, startVerifyingAmbient, until, type VerifyingAmbient } from '../support/verifyingAmbient.ts';

const NS = 'side-sandbox';

/**
 * Removes the capture: our nft nat table, or the jump with whichever iptables holds it (reading the
 * other would load an empty table there and change the dump).
 */
function removeCapture(netns: string, nftables: boolean): boolean {
  if (nftables) return inNetns(netns, ['nft', 'delete', 'table', 'inet', 'istio-proxy-nat']);
  const holder = ['iptables-nft', 'iptables-legacy'].find((bin) =>
    execFileSync('nsenter', [`--net=${netns}`, '--', `${bin}-save`, '-t', 'nat'], { encoding: 'utf8' }).includes('-j ISTIO_OUTPUT'),
  );
  return holder !== undefined && inNetns(netns, [holder, '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT']);
}

for (const backend of [
  { name: 'iptables', env: {} },
  { name: 'nftables', env: { NATIVE_NFTABLES: 'true' } },
])
  describe(`[sidecar ${backend.name}] a sandbox re-created under the same UID without an ADD`, {
    skip: kernelSkip,
    timeout: 240_000,
  }, () => {
    let v: VerifyingAmbient;
    let pod: PodSandbox;
    let programmed: string;
    const object = (sandbox: PodSandbox) => {
      const o = sidecarPod(NS, sandbox.name);
      return {
        ...o,
        metadata: { ...o.metadata, uid: sandbox.uid },
        status: { phase: 'Running', podIP: sandbox.ip, podIPs: [{ ip: sandbox.ip }] },
      };
    };

    before(async () => {
      v = await startVerifyingAmbient('amb-side', backend.env, backend.name === 'nftables');
      v.rig.api.upsertNamespace(namespaceObject(NS));
      pod = await v.node.addPod(NS, 'web-0', 5);
      v.rig.api.upsertPod(object(pod));
      const res = await v.rig.exec('ADD', object(pod), attachmentOf(pod));
      assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
      programmed = await netnsRuleset(pod.netns.path);
      assert.match(programmed, CAPTURE_CHAIN);
    });
    after(async () => {
      await v?.close();
    });

    it('same IP, old netns gone: captured in the new netns within an interval (netns_replaced, repaired), then verified there', async () => {
      const replaced = await v.node.replaceSandbox(pod);
      assert.doesNotMatch(await netnsRuleset(replaced.netns.path), ANY_ISTIO_STATE, 'the new netns starts without rules');
      const line = await v.driftLine(`${NS}/${pod.name}`, 'netns_replaced');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      assert.match(JSON.stringify(line.drift), new RegExp(`runs in inode ${replaced.inode}\\b.*was inode ${pod.inode}\\b`));
      assert.equal(await netnsRuleset(replaced.netns.path), programmed, 'the rules of an ADD, in the new netns');
      assert.equal(await v.driftCount('netns_replaced', 'repaired'), 1);
      // From now on the attachment names the new netns: rules removed there are put back there.
      assert.ok(removeCapture(replaced.netns.path, backend.name === 'nftables'), 'capture removed from the new netns');
      await until('the capture repaired in the new netns', async () => (await netnsRuleset(replaced.netns.path)) === programmed);
      pod = replaced;
    });

    it('same IP, old netns kept at its path (still carrying the address): the new netns captured, the old one untouched', async () => {
      // A pod of its own, whose attachment names the runtime's netns path (a bind mount kept alive).
      const other = await v.node.addPod(NS, 'web-1', 6);
      v.rig.api.upsertPod(object(other));
      const res = await v.rig.exec('ADD', object(other), attachmentOf(other));
      assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
      const oldRules = await netnsRuleset(other.netns.path);
      const replaced = await v.node.replaceSandbox(other, { keepOld: true });
      const line = await v.driftLine(
        `${NS}/${other.name}`,
        'netns_replaced',
        undefined,
        /still names inode \d+, where the pod no longer runs/,
      );
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      await until('the new netns captured', async () => (await netnsRuleset(replaced.netns.path)) === oldRules);
      assert.equal(await netnsRuleset(other.netns.path), oldRules, 'the old netns is not touched');
    });

    it('new IP, old netns kept: captured once the new netns carries an address of the pod; the old netns untouched', async () => {
      const old = pod;
      const oldRules = await netnsRuleset(old.netns.path);
      const replaced = await v.node.replaceSandbox(old, { index: 9, keepOld: true });
      // Until kubelet reports the new IP, the new netns carries none of the pod's addresses.
      await new Promise((r) => setTimeout(r, 2_500));
      assert.doesNotMatch(await netnsRuleset(replaced.netns.path), ANY_ISTIO_STATE, 'not captured on the word of a cgroup alone');
      v.rig.api.upsertPod(object(replaced));
      await until('the new netns captured', async () => (await netnsRuleset(replaced.netns.path)) === programmed);
      assert.equal(await netnsRuleset(old.netns.path), oldRules, 'the old netns is not touched');
      assert.equal(await v.driftCount('netns_replaced', 'repaired'), 3);
    });
  });
