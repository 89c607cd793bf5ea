/**
 * Hand-off (root, real kernel): the built plugin exec'd as libcni does against a real
 * pod netns veth-joined to a "node" netns, with `dist/install-cni` running against a scratch host
 * root and the fake Kubernetes API. A sidecar pod gets its ISTIO_* rules from the agent and its
 * traffic is really captured; a plain pod gets nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { findLog } from '../support/pluginLogLines.ts';
import { namespaceObject, plainPod, sidecarPod } from '../support/meshPods.ts';
import { ANY_ISTIO_STATE, netnsRuleset } from '../support/netnsRuleset.ts';
import { createPodNetworkFixture, type PodNetworkFixture } from '../support/podNetworkFixture.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { startAgentRig, type AgentRig, type PodAttachment } from '../support/startAgentRig.ts';
import { socketWorkers } from '../support/startSocketWorker.ts';

const APP_UID = 1000;
const PROXY_UID = 1337;

function attachmentOf(net: PodNetworkFixture, containerId: string): PodAttachment {
  return { netns: net.pod.path, containerId, address: `${net.pod.ipv4}/24`, gateway: net.node.ipv4 };
}

describe('node agent hand-off (plugin exec → agent → rules in the pod netns)', { skip: kernelSkip, timeout: 180_000 }, () => {
  let rig: AgentRig;

  before(async () => {
    rig = await startAgentRig();
    rig.api.upsertNamespace(namespaceObject('default'));
    rig.api.upsertPod(sidecarPod('default', 'reviews-v1-0'));
    rig.api.upsertPod(plainPod('default', 'plain-0'));
  });
  after(async () => {
    await rig?.close();
  });

  it('a sidecar pod gets ISTIO_* rules from the agent and its traffic is captured', async (t) => {
    const net = createPodNetworkFixture(t);
    const pod = sidecarPod('default', 'reviews-v1-0');
    const attachment = attachmentOf(net, 'c0ffee01');
    const res = await rig.exec('ADD', pod, attachment);
    assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
    const out = JSON.parse(res.stdout) as { ips?: { address: string }[] };
    assert.deepEqual(
      out.ips?.map((ip) => ip.address),
      [`${net.pod.ipv4}/24`],
      'prevResult passed through',
    );
    const handled = findLog(res.stderr, 'pod handled by agent');
    assert.equal(handled?.verdict, 'redirected', res.stderr);
    await rig.daemon.waitForLog((e) => e.msg === 'sidecar capture programmed' && e.pod === 'default/reviews-v1-0');

    const rules = await netnsRuleset(net.pod.path);
    for (const chain of ['ISTIO_INBOUND', 'ISTIO_IN_REDIRECT', 'ISTIO_OUTPUT', 'ISTIO_REDIRECT']) {
      assert.match(rules, new RegExp(chain), `${chain} in the pod netns`);
    }

    const start = socketWorkers(t);
    const proxy = await start(net.pod.path);
    const app = await start(net.pod.path, APP_UID);
    const proxyUser = await start(net.pod.path, PROXY_UID);
    const node = await start(net.node.path);
    await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 15001, name: 'outbound' });
    await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 15006, name: 'inbound' });
    await proxy.listen({ proto: 'tcp', host: '0.0.0.0', port: 8080, name: 'app' });
    await node.listen({ proto: 'tcp', host: net.node.ipv4, port: 8000, name: 'node' });

    const outbound = await app.connect({ proto: 'tcp', host: net.node.ipv4, port: 8000 });
    assert.equal(outbound.listener, 'outbound', 'an app connection to the outside lands on 15001');
    assert.deepEqual(outbound.originalDst, { address: net.node.ipv4, port: 8000 });
    const inbound = await node.connect({ proto: 'tcp', host: net.pod.ipv4, port: 8080 });
    assert.equal(inbound.listener, 'inbound', 'an inbound connection to the app port lands on 15006');
    assert.deepEqual(inbound.originalDst, { address: net.pod.ipv4, port: 8080 });
    const own = await proxyUser.connect({ proto: 'tcp', host: net.node.ipv4, port: 8000 });
    assert.equal(own.listener, 'node', "the proxy's own uid is not captured");

    const check = await rig.exec('CHECK', pod, attachment);
    assert.equal(check.code, 0, `CHECK: ${check.stdout}${check.stderr}`);
    const del = await rig.exec('DEL', pod, attachment);
    assert.equal(del.code, 0, `DEL: ${del.stdout}${del.stderr}`);
  });

  it('a plain pod passes through and nothing is programmed in its netns', async (t) => {
    const net = createPodNetworkFixture(t);
    const res = await rig.exec('ADD', plainPod('default', 'plain-0'), attachmentOf(net, 'c0ffee02'));
    assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
    const out = JSON.parse(res.stdout) as { ips?: { address: string }[] };
    assert.deepEqual(
      out.ips?.map((ip) => ip.address),
      [`${net.pod.ipv4}/24`],
    );
    assert.equal(findLog(res.stderr, 'pod handled by agent')?.verdict, 'skipped', res.stderr);
    const rules = await netnsRuleset(net.pod.path);
    assert.doesNotMatch(rules, ANY_ISTIO_STATE, `no ISTIO chains in the plain pod's netns:\n${rules}`);
  });
});
