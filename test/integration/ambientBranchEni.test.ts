/**
 * AWS branch ENI probe rules (root, real kernel): `dist/install-cni` with ambient on in a scratch node
 * netns whose tcp_early_demux is 0, a pod routed the way aws-vpc-cni routes a branch ENI pod (VLAN
 * link, its own table, iif rules at priority 10) and a regular pod. Enrolling the branch ENI pod
 * through the built plugin adds `to <pod> lookup <table> priority 512` and `iif <veth> lookup local
 * priority 9` to the node; deleting it removes them; the regular pod changes no rule; with
 * AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE=false nothing is added.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ambientPodObject, createAmbientNode, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import { ipRules, layBranchEniPod, setTcpEarlyDemux, type BranchEniLayout } from '../support/branchEniLayout.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { AMBIENT_LABEL, namespaceObject } from '../support/meshPods.ts';

const NS = 'amb-eni';
const REDIRECTION = 'ambient.istio.io/redirection';

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const enabled of [true, false])
  describe(`[AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE=${enabled}] AWS branch ENI probe rules`, { skip: kernelSkip, timeout: 180_000 }, () => {
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const pods: PodSandbox[] = [];

    const enrol = async (s: PodSandbox) => {
      rig.api.upsertPod(ambientPodObject(s));
      const res = await rig.exec('ADD', rig.api.getPod(NS, s.name)!, attachmentOf(s));
      assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
      await until(`${s.name} enrolled`, () => rig.api.getPod(NS, s.name)?.metadata.annotations?.[REDIRECTION] === 'enabled');
    };
    const remove = async (s: PodSandbox) => {
      rig.api.deletePod(NS, s.name);
      await until(`${s.name} removed from ztunnel`, () => ztunnel.dels.includes(s.uid));
    };

    before(async () => {
      node = createAmbientNode();
      // Read once by the agent, at its first detection: set before it starts.
      setTcpEarlyDemux(node.netns, 0);
      rig = await startAmbientRig(node.netns.path, enabled ? {} : { AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE: 'false' });
      await rig.startDaemon();
      rig.api.upsertNamespace(namespaceObject(NS, { [AMBIENT_LABEL]: 'ambient' }));
      ztunnel = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => pods.find((p) => p.uid === uid)?.netns.path });
      await ztunnel.waitFor(() => ztunnel.snapshots[0] === 1, 'the first snapshot');
    });
    after(async () => {
      ztunnel?.close();
      await rig?.close();
      await node?.remove();
    });

    it(
      enabled
        ? 'a branch ENI pod gets the forward and return rules on enrolment, and loses them on removal'
        : 'a branch ENI pod enrolled with the setting off gets no rule',
      async () => {
        const pod = await node.addPod(NS, 'eni-0', 0);
        pods.push(pod);
        const eni: BranchEniLayout = layBranchEniPod(node.netns, pod, 1);
        const awsOnly = ipRules(node.netns);
        assert.ok(awsOnly.includes(`${eni.iifPriority} iif ${pod.hostVeth} lookup ${eni.table}`), awsOnly.join('\n'));

        await enrol(pod);
        const ours = [`512 to ${pod.ip} lookup ${eni.table}`, `${eni.iifPriority - 1} iif ${pod.hostVeth} lookup 255`];
        const afterEnrol = ipRules(node.netns);
        if (!enabled) {
          assert.deepEqual(afterEnrol, awsOnly);
          return;
        }
        for (const rule of ours) assert.ok(afterEnrol.includes(rule), `missing "${rule}" in:\n${afterEnrol.join('\n')}`);
        assert.deepEqual(
          afterEnrol.filter((r) => !ours.includes(r)),
          awsOnly,
          'nothing else changed',
        );
        assert.equal(
          rig.daemon.logged(
            (e) => e.msg === 'branch ENI pod: probe traffic routed over its veth' && e.pod === `${NS}/${pod.name}` && e.ip === pod.ip,
          ).length,
          1,
        );

        await remove(pod);
        await until('the branch ENI rules removed', () => !ipRules(node.netns).some((r) => ours.includes(r)));
        assert.deepEqual(ipRules(node.netns), awsOnly);
        assert.equal(rig.daemon.logged((e) => e.msg === 'branch ENI pod: probe rules removed' && e.pod === `${NS}/${pod.name}`).length, 1);
      },
    );

    it('a regular pod gets no rule', async () => {
      const pod = await node.addPod(NS, 'regular-0', 1);
      pods.push(pod);
      const before = ipRules(node.netns);
      await enrol(pod);
      assert.deepEqual(ipRules(node.netns), before);
      await remove(pod);
      assert.deepEqual(ipRules(node.netns), before);
      assert.deepEqual(
        rig.daemon.logged((e) => typeof e.msg === 'string' && e.msg.includes('branch ENI') && e.pod === `${NS}/${pod.name}`),
        [],
      );
    });
  });
