/**
 * A live node whose agent restarts with the other NATIVE_NFTABLES while pods captured by the first
 * backend run, and continuous verification passes over them (root, real kernel). Ambient: the node's
 * host state names its backend (the iptables probe ipset, or the nft host table `inet
 * istio-ambient-nat`), so the node stays on it until a reboot, either way. Sidecar: nothing on the
 * node names one, so the node takes the new setting for new pods while a running pod keeps the
 * backend it was captured with. Either way each pod ends with exactly one backend's rules, the node
 * with one backend's host rules and sets, and real traffic is still captured.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ambientPodObject } from '../support/ambientNode.ts';
import { ipsetNames, probeSetEntries, probeSnatPackets } from '../support/ambientNodeState.ts';
import { type AmbientRig, attachmentOf } from '../support/ambientRig.ts';
import { morePasses } from '../support/daemonMetrics.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { captureBackends, netnsRuleset } from '../support/netnsRuleset.ts';
import type { AgentRig } from '../support/startAgentRig.ts';
import { type SocketWorker, socketWorkers } from '../support/startSocketWorker.ts';
import { addSidecarPod } from '../support/addSidecarPod.ts';
import { startVerifyingAmbient, until } from '../support/verifyingAmbient.ts';
import { verifyingRig } from '../support/verifyingRig.ts';

type Backend = 'iptables' | 'nft';
const envOf = (b: Backend) => ({ NATIVE_NFTABLES: b === 'nft' ? 'true' : 'false' });
type StartWorker = ReturnType<typeof socketWorkers>;
const other = (b: Backend): Backend => (b === 'nft' ? 'iptables' : 'nft');
const APP_UID = 1000;
/** The nft host rule knows kubelet probes by socket owner (`startVerifyingAmbient` runs a fake kubelet as this uid). */
const KUBELET_UID = 4242;

/** Every pod check so far (`istio_cni_pod_verifications_total`, all results). */
async function verifications(rig: AmbientRig): Promise<number> {
  const { body } = await rig.get('metrics', '/metrics');
  let total = 0;
  for (const m of body.matchAll(/^istio_cni_pod_verifications_total\{[^}]*\} (\d+)$/gm)) total += Number(m[1]);
  return total;
}

/**
 * An app connection (uid 1000) from the pod to `nodeIp`:8000 lands on the pod's 15001 (the proxy's
 * or ztunnel's outbound listener), not on the node's listener there. Returns the pod-side worker.
 */
async function outboundCaptured(start: StartWorker, podNetns: string, nodeNetns: string, nodeIp: string): Promise<SocketWorker> {
  const capture = await start(podNetns);
  await capture.listen({ proto: 'tcp', host: '0.0.0.0', port: 15001, name: 'outbound' });
  const nodeServer = await start(nodeNetns);
  await nodeServer.listen({ proto: 'tcp', host: nodeIp, port: 8000, name: 'node' });
  const app = await start(podNetns, APP_UID);
  assert.equal((await app.connect({ proto: 'tcp', host: nodeIp, port: 8000 })).listener, 'outbound');
  return capture;
}

function driftRepairs(lines: readonly string[]): string[] {
  return lines.filter((l) => l.includes('"pod drifted from its plan"') && l.includes('"repaired"'));
}

for (const from of ['iptables', 'nft'] as const) {
  const to = other(from);

  describe(`[ambient ${from} → ${to}] the node stays on ${from} until a reboot`, { skip: kernelSkip, timeout: 180_000 }, () => {
    it('one backend in the pod and the node, traffic captured, a new pod on the same backend', async (t) => {
      const ns = `switch-${from}`;
      const amb = await startVerifyingAmbient(ns, { ...envOf(from), VERIFY_INTERVAL: '1s' }, true);
      t.after(() => amb.close());
      const { rig, node, pod, ztunnel } = amb;
      assert.deepEqual(captureBackends(await netnsRuleset(pod.netns.path)), [from]);

      assert.equal(await rig.daemon.stop('SIGKILL'), null, 'a restart that keeps the node state (as a rollout does)');
      await until('ztunnel noticing the agent is gone', () => !ztunnel.connected);
      await rig.startDaemon(true, { ...envOf(to), VERIFY_INTERVAL: '1s' });
      const stays =
        from === 'nft' ? 'NATIVE_NFTABLES=false, but this node stays on nftables' : 'NATIVE_NFTABLES=true, but this node stays on iptables';
      const line = await rig.daemon.waitForLog((e) => e.msg === stays, 10_000);
      assert.match(String(line.reason), /reboot the node to complete the switch/);
      await ztunnel.reconnect();
      await ztunnel.waitFor(() => ztunnel.snapshots[ztunnel.session - 1] === 1, 'the snapshot after the restart');
      // Two verification passes over the pod (each checks the node's host rules first).
      const checked = await verifications(rig);
      await until('two verification passes', async () => (await verifications(rig)) >= checked + 2);

      assert.deepEqual(captureBackends(await netnsRuleset(pod.netns.path)), [from], 'the pod holds its own backend only');
      const host = await netnsRuleset(node.netns.path);
      assert.deepEqual(captureBackends(host), [from], `the node holds one backend's host rules:\n${host}`);
      const ipsets = (await ipsetNames(node.netns.path)).filter((n) => n.startsWith('istio-'));
      assert.deepEqual(ipsets, from === 'iptables' ? ['istio-inpod-probes-v4'] : [], 'probe sets of one backend only');
      assert.deepEqual(
        (await probeSetEntries(node.netns.path, from === 'nft' ? 'nft' : 'ipset')).map((e) => e.uid),
        [pod.uid],
        'the pod in the probe set of the node backend',
      );
      assert.deepEqual(driftRepairs(rig.daemon.lines), [], 'verification found nothing to repair');

      // Real traffic: outbound to ztunnel's 15001, a kubelet probe SNATed and let through.
      const start = socketWorkers(t);
      const zt = await outboundCaptured(start, pod.netns.path, node.netns.path, pod.gateway);
      await zt.listen({ proto: 'tcp', host: '0.0.0.0', port: 8080, name: 'app' });
      const prober = await start(node.netns.path, KUBELET_UID);
      assert.equal((await prober.connect({ proto: 'tcp', host: pod.ip, port: 8080 })).listener, 'app');
      assert.ok((await probeSnatPackets(node.netns.path)) > 0, 'the probe went through the host SNAT rule');

      // A new pod gets the backend the node is on.
      const pod2 = await node.addPod(ns, 'app-1', 1);
      amb.netnsOf.set(pod2.uid, pod2.netns.path);
      rig.api.upsertPod(ambientPodObject(pod2));
      const res = await rig.exec('ADD', rig.api.getPod(ns, pod2.name)!, attachmentOf(pod2));
      assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
      assert.deepEqual(captureBackends(await netnsRuleset(pod2.netns.path)), [from]);
    });
  });

  describe(`[sidecar ${from} → ${to}] a running pod keeps its backend, a new pod gets the new one`, {
    skip: kernelSkip,
    timeout: 180_000,
  }, () => {
    const agent = verifyingRig(envOf(from));

    it('one backend in each pod after verification, traffic still captured', async (t) => {
      const rig: AgentRig = agent();
      const net = await addSidecarPod(t, rig, 'web-0');
      const programmed = await netnsRuleset(net.pod.path);
      assert.deepEqual(captureBackends(programmed), [from]);

      await rig.daemon.stop();
      await rig.restartDaemon(envOf(to));
      await morePasses(rig.daemon, 2);
      assert.deepEqual(driftRepairs(rig.daemon.lines), [], 'verification found nothing to repair');
      assert.deepEqual(captureBackends(await netnsRuleset(net.pod.path)), [from], 'the pod holds its own backend only');
      assert.equal(await netnsRuleset(net.pod.path), programmed, 'and exactly what ADD programmed');

      const start = socketWorkers(t);
      const proxy = await outboundCaptured(start, net.pod.path, net.node.path, net.node.ipv4);
      await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 15006, name: 'inbound' });
      const node = await start(net.node.path);
      assert.equal((await node.connect({ proto: 'tcp', host: net.pod.ipv4, port: 8080 })).listener, 'inbound');

      const net2 = await addSidecarPod(t, rig, 'web-1');
      assert.deepEqual(captureBackends(await netnsRuleset(net2.pod.path)), [to], 'a new pod gets the backend the node is on');
      await morePasses(rig.daemon, 4);
      assert.deepEqual(driftRepairs(rig.daemon.lines), [], 'both pods judged against their own backend');
      assert.deepEqual(captureBackends(await netnsRuleset(net.pod.path)), [from]);
      assert.deepEqual(captureBackends(await netnsRuleset(net2.pod.path)), [to]);
    });
  });
}
