/**
 * Repair in place (root, real kernel): a sidecar pod started before the plugin was installed has no
 * capture rules, and its `istio-validation` init container failed with 126. `dist/install-cni`
 * with REPAIR_REPAIR_PODS sees the pod through the fake Kubernetes API, finds the pod's netns in
 * /proc by its IP, programs the plugin's rules there, and from then on the pod's traffic is
 * captured. It repairs the pod once, however many updates follow.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { brokenPod, crashLooping } from '../support/brokenPod.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';
import { startAgentRig, type AgentRig } from '../support/startAgentRig.ts';
import { socketWorkers } from '../support/startSocketWorker.ts';

const APP_UID = 1000;
const backends = [
  { name: 'iptables', env: {} },
  { name: 'nftables', env: { NATIVE_NFTABLES: 'true' } },
] as const;

for (const backend of backends)
  describe(`repair controller: repair in place [${backend.name}]`, { skip: kernelSkip, timeout: 180_000 }, () => {
    let rig: AgentRig;

    before(async () => {
      rig = await startAgentRig({ REPAIR_ENABLED: 'true', REPAIR_REPAIR_PODS: 'true', HOST_PROC_DIR: '/proc', ...backend.env });
    });
    after(async () => {
      await rig?.close();
    });

    it('a pod whose validation failed with 126 gets the plugin rules in its running netns, once', async (t) => {
      const net = createPodNetworkFixture(t);
      // A node-wide unique address, so no other test's pod netns can match (fixtures reuse 10.99.0.2).
      const podIp = `10.97.${randomInt(0, 256)}.${randomInt(1, 255)}`;
      execFileSync('ip', ['-n', net.pod.name, 'addr', 'add', `${podIp}/32`, 'dev', 'lo']);

      const start = socketWorkers(t);
      // The first process in the pod netns plays the pause container (the oldest process wins).
      const proxy = await start(net.pod.path);
      const app = await start(net.pod.path, APP_UID);
      const node = await start(net.node.path);
      await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 15001, name: 'outbound' });
      await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 15006, name: 'inbound' });
      await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 8080, name: 'app' });
      await node.listen({ proto: 'tcp', host: net.node.ipv4, port: 8000, name: 'node' });

      assert.equal(
        (await app.connect({ proto: 'tcp', host: net.node.ipv4, port: 8000 })).listener,
        'node',
        'before the repair nothing is captured',
      );
      const chains =
        backend.name === 'iptables'
          ? ['ISTIO_INBOUND', 'ISTIO_IN_REDIRECT', 'ISTIO_OUTPUT', 'ISTIO_REDIRECT']
          : ['table inet istio-proxy-nat'];
      assert.doesNotMatch(await netnsRuleset(net.pod.path), /ISTIO_OUTPUT|istio-proxy/);

      const name = `broken-${podIp.replaceAll('.', '-')}`;
      rig.api.upsertPod(brokenPod(name, podIp, crashLooping));
      const repaired = await rig.daemon.waitForLog(
        (e) => e.pod === `default/${name}` && typeof e.msg === 'string' && e.msg.startsWith('pod repaired'),
        30_000,
      );
      assert.match(String(repaired.netns), /^\/proc\/\d+\/ns\/net \(inode \d+/);

      const rules = await netnsRuleset(net.pod.path);
      for (const chain of chains) assert.match(rules, new RegExp(chain), `${chain} in the pod netns`);
      const outbound = await app.connect({ proto: 'tcp', host: net.node.ipv4, port: 8000 });
      assert.equal(outbound.listener, 'outbound', 'after the repair an app connection lands on 15001');
      assert.deepEqual(outbound.originalDst, { address: net.node.ipv4, port: 8000 });
      const inbound = await node.connect({ proto: 'tcp', host: net.pod.ipv4, port: 8080 });
      assert.equal(inbound.listener, 'inbound', 'inbound connections land on 15006');

      // More updates of the same pod (it keeps crash-looping, then recovers): no second repair.
      rig.api.upsertPod(brokenPod(name, podIp, { ...crashLooping, restartCount: 2 }));
      rig.api.upsertPod(
        brokenPod(name, podIp, {
          state: { terminated: { exitCode: 0, reason: 'Completed' } },
          lastState: crashLooping.lastState,
        }),
      );
      const metrics = async () => (await fetch(`http://127.0.0.1:${rig.daemon.monitoringPort}/metrics`)).text();
      const events = () => rig.api.events.filter((e) => (e as { involvedObject?: { name?: string } }).involvedObject?.name === name);
      // The recovered pod's update is processed after the earlier ones (one queue); wait for the event of the repair.
      for (let i = 0; i < 200 && events().length === 0; i++) await new Promise((r) => setTimeout(r, 25));
      const event = events()[0] as unknown as { type: string; reason: string; message: string; source: { component: string } };
      assert.equal(event?.reason, 'RepairBrokenPod');
      assert.equal(event?.type, 'Warning');
      assert.equal(event?.source.component, 'cni-repair');
      assert.match(await metrics(), /istio_cni_repair_pods_repaired_total\{type="repair",result="success"\} 1\n/);
      const repairs = rig.daemon.lines.filter(
        (l) => l.includes(`"default/${name}"`) && l.includes('"pod detected as broken, repairing in place"'),
      );
      assert.equal(repairs.length, 1, rig.daemon.lines.join('\n'));
      assert.equal(events().length, 1);
    });

    it('a pod whose IP is in no netns on this node is retried, logged by name, and the daemon stays up', async () => {
      const name = 'nowhere-0';
      rig.api.upsertPod(brokenPod(name, '10.96.255.254', crashLooping));
      const failed = await rig.daemon.waitForLog((e) => e.pod === `default/${name}` && e.msg === 'failed to repair pod in place', 30_000);
      assert.match(String(failed.error), /no network namespace on this node holds pod IP "10.96.255.254"/);
      assert.equal(rig.daemon.child.exitCode, null);
      const ready = await fetch(`http://127.0.0.1:${rig.daemon.readinessPort}/readyz`);
      assert.equal(ready.status, 200);
      rig.api.deletePod('default', name);
    });
  });
