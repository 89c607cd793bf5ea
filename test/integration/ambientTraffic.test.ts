/**
 * Issue 6 (root, real kernel): an ambient pod ADD through the built plugin and `dist/install-cni`
 * running in a scratch node netns. The fake ztunnel receives the pod's netns fd, opens its
 * listeners inside the pod through that fd, and real traffic shows the capture: app → 15001,
 * inbound → 15006, HBONE (15008) untouched, a probe from the node SNATed to 169.254.7.127 and let
 * straight through. Without a ztunnel the ADD fails closed with the retryable code 11.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { createAmbientNode, ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { duplicates, iptablesRuleLines, probeSetEntries } from '../support/ambientNodeState.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from '../support/meshPods.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { notRootSkip } from '../support/podNetworkFixture.ts';
import { startSocketWorker, type SocketWorker } from '../support/startSocketWorker.ts';

const run = promisify(execFile);
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

/** Packets counted by the host probe SNAT rule (whichever xtables backend holds it). */
async function snatPackets(netnsPath: string): Promise<number> {
  let packets = 0;
  for (const cmd of ['iptables-nft-save', 'iptables-legacy-save']) {
    const { stdout } = await run('nsenter', [`--net=${netnsPath}`, '--', cmd, '-c', '-t', 'nat']).catch(() => ({ stdout: '' }));
    for (const m of stdout.matchAll(/^\[(\d+):\d+\] -A ISTIO_POSTRT .*-j SNAT --to-source 169\.254\.7\.127$/gm)) packets += Number(m[1]);
  }
  return packets;
}

async function waitUntil(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('ambient ADD through the built plugin and daemon', { skip: notRootSkip, timeout: 180_000 }, () => {
  let node: AmbientNode;
  let rig: AmbientRig;
  let ztunnel: FakeZtunnel;
  const netnsOf = new Map<string, string>();
  const workers: SocketWorker[] = [];

  before(async () => {
    node = createAmbientNode();
    rig = await startAmbientRig(node.netns.path);
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

    const rules = await netnsRuleset(pod.netns.path);
    assert.match(rules, /-A ISTIO_OUTPUT .*-j REDIRECT --to-ports 15001/);
    assert.match(rules, /-A ISTIO_PRERT .*! --dport 15008 .*-j REDIRECT --to-ports 15006/);
    assert.deepEqual(duplicates(await iptablesRuleLines(pod.netns.path)), []);

    assert.deepEqual(await probeSetEntries(node.netns.path), [{ ip: pod.ip, uid: pod.uid }]);
    const hostRules = (await iptablesRuleLines(node.netns.path)).join('\n');
    assert.match(hostRules, /nat -A POSTROUTING -j ISTIO_POSTRT/);
    assert.match(hostRules, /-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127/);
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
    const kubelet = await worker(node.netns.path);
    await kubelet.listen({ proto: 'tcp', host: pod.gateway, port: 8000, name: 'node' });
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

    const probe = await kubelet.connect({ proto: 'tcp', host: pod.ip, port: 8080 });
    assert.equal(probe.listener, 'app', 'a probe from the node reaches the app, not ztunnel');
    assert.ok((await snatPackets(node.netns.path)) > 0, 'the probe went through the host SNAT rule');
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
    assert.ok(!(await probeSetEntries(node.netns.path)).some((e) => e.uid === pod2.uid), 'no probe-set entry for the refused pod');

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
    assert.deepEqual((await probeSetEntries(node.netns.path)).map((e) => e.uid).sort(), [pod.uid, pod2.uid].sort());
  });
});
