import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createNetnsHandle, type NetnsHandle, PodNetnsRefusedError } from '@istio-cni/dataplane';
import { createInPlaceRepairer } from '../src/repair/repairPodInPlace.ts';
import { brokenPodWaiting, makePod } from './repairFixtures.ts';

describe('createInPlaceRepairer', () => {
  it('applies the capture rules inside the found netns and closes it afterwards', async () => {
    const applied: string[] = [];
    let handle: NetnsHandle | undefined;
    const repair = createInPlaceRepairer({
      findNetns: async (ip) => {
        assert.equal(ip, '10.1.1.5');
        handle = createNetnsHandle({ fd: 9, inode: 20, source: '/host/proc/200/ns/net', path: '/proc/77/fd/9', release: () => {} });
        return handle;
      },
      checkNetns: (netns) => assert.equal(netns, handle),
      capture: {
        apply: async (pod, netns) => {
          applied.push(`${pod.metadata.name} in ${netns}`);
          return 'applied';
        },
      },
    });
    const pod = { ...brokenPodWaiting, status: { ...brokenPodWaiting.status, podIP: '10.1.1.5' } };
    assert.equal(await repair(pod), '/host/proc/200/ns/net (inode 20, applied)');
    assert.deepEqual(applied, ['BrokenPodWaiting in /proc/77/fd/9']);
    assert.equal(handle?.closed, true);
  });

  it('refuses pods without an IP or on the host network, naming the pod', async () => {
    const repair = createInPlaceRepairer({
      findNetns: async () => assert.fail('not looked up'),
      checkNetns: () => assert.fail('not checked'),
      capture: { apply: async () => assert.fail('not applied') },
    });
    await assert.rejects(repair(makePod({ name: 'NoIp' })), /pod default\/NoIp has no IP yet/);
    const host = makePod({ name: 'Host', podIP: '10.0.0.1' });
    await assert.rejects(repair({ ...host, spec: { ...host.spec, hostNetwork: true } }), /pod default\/Host uses the host network/);
  });

  it('fails naming the IP when no network namespace holds it', async () => {
    const repair = createInPlaceRepairer({
      findNetns: async () => undefined,
      checkNetns: () => assert.fail('not checked'),
      capture: { apply: async () => assert.fail('not applied') },
    });
    await assert.rejects(repair(makePod({ name: 'Gone', podIP: '10.1.1.9' })), /no network namespace on this node holds pod IP "10.1.1.9"/);
  });

  it("a found netns the guard refuses (the node's own) is never programmed, and is closed", async () => {
    let handle: NetnsHandle | undefined;
    const repair = createInPlaceRepairer({
      findNetns: async () => (handle = createNetnsHandle({ fd: 9, inode: 1, source: '/host/proc/1/ns/net', release: () => {} })),
      checkNetns: (netns) => {
        throw new PodNetnsRefusedError(netns.source, "it is the node's own network namespace");
      },
      capture: { apply: async () => assert.fail('not applied') },
    });
    const pod = { ...brokenPodWaiting, status: { ...brokenPodWaiting.status, podIP: '10.1.1.5' } };
    await assert.rejects(repair(pod), (err: unknown) => {
      assert.ok(err instanceof PodNetnsRefusedError);
      assert.match(err.message, /^refusing network namespace "\/host\/proc\/1\/ns\/net": it is the node's own network namespace$/);
      return true;
    });
    assert.equal(handle?.closed, true);
  });
});
