/**
 * Ambient traffic (root, real kernel): an ambient pod ADD through the built plugin and `dist/install-cni`
 * running in a scratch node netns. The fake ztunnel receives the pod's netns fd, opens its
 * listeners inside the pod through that fd, and real traffic shows the capture: app → 15001,
 * inbound → 15006, HBONE (15008) untouched, a probe from the node SNATed to 169.254.7.127 and let
 * straight through. Without a ztunnel the ADD fails closed with the retryable code 11.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createAmbientNode, ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { duplicates, iptablesRuleLines, probeSetEntries, probeSnatPackets } from '../support/ambientNodeState.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import { startFakeKubelet, type FakeKubelet } from '../support/fakeKubelet.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from '../support/meshPods.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { startSocketWorker, type SocketWorker } from '../support/startSocketWorker.ts';

const NS = 'amb-traffic';
const REDIRECTION = 'ambient.istio.io/redirection';
const APP_UID = 1000;

function annotationOf(rig: AmbientRig, pod: PodSandbox): string | undefined {
  return rig.api.getPod(pod.namespace, pod.name)?.metadata.annotations?.[REDIRECTION];
}

/** The CNI error the plugin printed on stdout (libcni reads it there). */
function cniError(stdout: string): { code?: number; msg?: string } {
  return JSON.parse(stdout) as { code?: number; msg?: string };
}

/** The nft host rule knows kubelet probes by socket owner: a fake kubelet runs as this uid. */
const KUBELET_UID = 4242;

const backends = [
  {
    name: 'iptables',
    env: {},
    sets: 'ipset',
    inPod: [/-A ISTIO_OUTPUT .*-j REDIRECT --to-ports 15001/, /-A ISTIO_PRERT .*! --dport 15008 .*-j REDIRECT --to-ports 15006/],
    host: [
      /-A POSTROUTING -j ISTIO_POSTRT/,
      /-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127/,
    ],
  },
  {
    name: 'nftables',
    env: { NATIVE_NFTABLES: 'true' },
    sets: 'nft',
    inPod: [/table inet istio-ambient-nat/, /redirect to :15001/, /redirect to :15006/, /table inet istio-ambient-mangle/],
    host: [
      /table inet istio-ambient-nat/,
      new RegExp(`skuid ${KUBELET_UID} ip daddr @istio-inpod-probes-v4 counter .*snat ip to 169\\.254\\.7\\.127`),
    ],
  },
] as const;

async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const backend of backends)
  describe(`ambient ADD through the built plugin and daemon [${backend.name}]`, { skip: kernelSkip, timeout: 180_000 }, () => {
    let kubelet: FakeKubelet | undefined;
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const netnsOf = new Map<string, string>();
    const workers: SocketWorker[] = [];

    before(async () => {
      // Found by the agent's procfs scan at start-up (nft only).
      if (backend.name === 'nftables') kubelet = await startFakeKubelet(KUBELET_UID);
      node = createAmbientNode();
      rig = await startAmbientRig(node.netns.path, backend.env);
      await rig.startDaemon();
      rig.api.upsertNamespace(namespaceObject(NS, { [AMBIENT_LABEL]: 'ambient' }));
      ztunnel = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => netnsOf.get(uid) });
      await ztunnel.waitFor(() => ztunnel.snapshots[0] === 1, 'the first (empty) snapshot');
    });
    after(async () => {
      await Promise.all(workers.map((w) => w.close()));
      ztunnel?.close();
      await rig?.close();
      await node?.remove();
      await kubelet?.stop();
    });

    const sandbox = async (name: string, index: number): Promise<PodSandbox> => {
      const s = await node.addPod(NS, name, index);
      netnsOf.set(s.uid, s.netns.path);
      rig.api.upsertPod(ambientPodObject(s));
      return s;
    };
    const worker = async (netns: string, uid?: number): Promise<SocketWorker> => {
      const w = await startSocketWorker(uid === undefined ? { netns } : { netns, uid, gid: uid });
      workers.push(w);
      return w;
    };

    let pod: PodSandbox;

    it('enrols the pod: in-pod rules, the netns fd to ztunnel, the probe set, the annotation', async () => {
      pod = await sandbox('app-0', 0);
      const res = await rig.exec('ADD', rig.api.getPod(NS, pod.name)!, attachmentOf(pod));
      assert.equal(res.code, 0, `ADD failed: ${res.stdout}\n${res.stderr}`);
      assert.match(res.stderr, /pod handled by agent.*enrolled/);

      const add = ztunnel.adds.find((a) => a.uid === pod.uid);
      assert.ok(add, `ztunnel got no add: ${ztunnel.log.join(', ')}`);
      assert.equal(add.inode, pod.inode, 'the fd ztunnel received is the pod netns');
      assert.equal(add.inSnapshot, false);
      assert.deepEqual(add.workload, { name: 'app-0', namespace: NS, service_account: 'sa-app-0' });
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.equal(annotationOf(rig, pod), 'enabled');
      assert.match((await rig.get('metrics', '/metrics')).body, /^ztunnel_connected 1$/m);

      const rules = await netnsRuleset(pod.netns.path);
      for (const re of backend.inPod) assert.match(rules, re);
      assert.deepEqual(duplicates(await iptablesRuleLines(pod.netns.path)), []);

      assert.deepEqual(await probeSetEntries(node.netns.path, backend.sets), [{ ip: pod.ip, uid: pod.uid }]);
      const hostRules = await netnsRuleset(node.netns.path);
      for (const re of backend.host) assert.match(hostRules, re);
    });

    it('real traffic: app → 15001, inbound → 15006, HBONE not captured, node probe bypasses ztunnel', async () => {
      const fd = ztunnel.netnsFd(pod.uid);
      assert.ok(fd !== undefined);
      // ztunnel's listeners, opened inside the pod through the fd it was handed.
      const zt = await worker(`/proc/${process.pid}/fd/${fd}`);
      await zt.listen({ proto: 'tcp', host: '0.0.0.0', port: 15001, name: 'ztunnel-outbound' });
      await zt.listen({ proto: 'tcp', host: '0.0.0.0', port: 15006, name: 'ztunnel-inbound' });
      await zt.listen({ proto: 'tcp', host: '0.0.0.0', port: 15008, name: 'ztunnel-hbone' });
      const appServer = await worker(pod.netns.path);
      await appServer.listen({ proto: 'tcp', host: '0.0.0.0', port: 8080, name: 'app' });
      const app = await worker(pod.netns.path, APP_UID);
      const nodeServer = await worker(node.netns.path);
      await nodeServer.listen({ proto: 'tcp', host: pod.gateway, port: 8000, name: 'node' });
      // iptables: any local socket of the node; nft: a socket of the kubelet's uid.
      const prober = backend.name === 'nftables' ? await worker(node.netns.path, KUBELET_UID) : nodeServer;
      const peerNetns = node.addPeer();
      const peer = await worker(peerNetns.path);

      const outbound = await app.connect({ proto: 'tcp', host: pod.gateway, port: 8000 });
      assert.equal(outbound.listener, 'ztunnel-outbound');
      assert.deepEqual(outbound.originalDst, { address: pod.gateway, port: 8000 });

      const inbound = await peer.connect({ proto: 'tcp', host: pod.ip, port: 8080 });
      assert.equal(inbound.listener, 'ztunnel-inbound');
      assert.deepEqual(inbound.originalDst, { address: pod.ip, port: 8080 });

      const hbone = await peer.connect({ proto: 'tcp', host: pod.ip, port: 15008 });
      assert.equal(hbone.listener, 'ztunnel-hbone', 'HBONE reaches ztunnel on 15008 itself, not the 15006 redirect');
      assert.deepEqual(hbone.local, { address: pod.ip, port: 15008 });

      const probe = await prober.connect({ proto: 'tcp', host: pod.ip, port: 8080 });
      assert.equal(probe.listener, 'app', 'a probe from the node reaches the app, not ztunnel');
      assert.ok((await probeSnatPackets(node.netns.path)) > 0, 'the probe went through the host SNAT rule');
    });

    it('without a connected ztunnel the ADD fails with code 11 and the pod is not marked enabled', async () => {
      ztunnel.drop();
      await waitUntil('ztunnel_connected 0', async () => /^ztunnel_connected 0$/m.test((await rig.get('metrics', '/metrics')).body));
      const pod2 = await sandbox('app-1', 1);
      const res = await rig.exec('ADD', rig.api.getPod(NS, pod2.name)!, attachmentOf(pod2));
      assert.notEqual(res.code, 0);
      const err = cniError(res.stdout);
      assert.equal(err.code, 11, res.stdout);
      assert.match(err.msg ?? '', /ztunnel/);
      assert.notEqual(annotationOf(rig, pod2), 'enabled');
      assert.ok(
        !(await probeSetEntries(node.netns.path, backend.sets)).some((e) => e.uid === pod2.uid),
        'no probe-set entry for the refused pod',
      );

      // ztunnel comes back: the snapshot has every pod the agent holds, then the runtime's retry succeeds.
      await ztunnel.reconnect();
      await ztunnel.waitFor(() => ztunnel.snapshots[ztunnel.session - 1] === 1, 'the snapshot');
      const snapshotAdds = ztunnel.adds.filter((a) => a.session === ztunnel.session && a.inSnapshot).map((a) => a.uid);
      assert.ok(snapshotAdds.includes(pod.uid), `snapshot lost the enrolled pod: ${ztunnel.log.join(', ')}`);
      const retry = await rig.exec('ADD', rig.api.getPod(NS, pod2.name)!, attachmentOf(pod2));
      assert.equal(retry.code, 0, retry.stdout);
      assert.equal(annotationOf(rig, pod2), 'enabled');
      assert.deepEqual([...ztunnel.known].sort(), [pod.uid, pod2.uid].sort());
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.deepEqual((await probeSetEntries(node.netns.path, backend.sets)).map((e) => e.uid).sort(), [pod.uid, pod2.uid].sort());
    });
  });
