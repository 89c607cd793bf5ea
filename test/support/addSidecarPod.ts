import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { sidecarPod } from './meshPods.ts';
import { createPodNetworkFixture, type PodNetworkFixture } from './podNetworkFixture.ts';
import type { AgentRig } from './startAgentRig.ts';

/** A sidecar pod `default/<name>` in the API and ADDed through the built plugin into a fresh pod network (removed after `t`). */
export async function addSidecarPod(t: TestContext, rig: AgentRig, name: string): Promise<PodNetworkFixture> {
  const pod = sidecarPod('default', name);
  rig.api.upsertPod(pod);
  const net = createPodNetworkFixture(t);
  const res = await rig.exec('ADD', pod, {
    netns: net.pod.path,
    containerId: `c-${name}`,
    address: `${net.pod.ipv4}/24`,
    gateway: net.node.ipv4,
  });
  assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
  return net;
}
