import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ambientConfigFromOptions, type Pod } from '@istio-cni/capture';
import {
  createNetnsHandle,
  createPodNetnsCache,
  type BranchEniProbeRules,
  createRecordingCommandRunner,
  iptablesBinaries,
  type NetnsHandle,
  type ProbeSetManager,
  type ZtunnelServer,
} from '@istio-cni/dataplane';
import { createJsonLogger } from '@istio-cni/handoff';
import { KubeConnectionError } from '@istio-cni/kube';
import { RetryableError } from '../src/ambient/meshDataplane.ts';
import { createNodeMeshDataplane } from '../src/ambient/nodeMeshDataplane.ts';
import type { PodAnnotator } from '../src/kube/podStatusAnnotator.ts';

const logLines: string[] = [];
const logger = createJsonLogger({ scope: 'test', threshold: 'debug', sink: (line) => void logLines.push(line) });
const UID = 'uid-app-0';
const IPS = ['10.100.0.2'];

const pod: Pod = {
  metadata: { name: 'app-0', namespace: 'mesh', uid: UID },
  spec: { containers: [{ name: 'app' }], serviceAccountName: 'sa-app' },
  status: { phase: 'Running', podIP: '10.100.0.2', podIPs: IPS.map((ip) => ({ ip })) },
};

/** Fakes for everything the dataplane talks to, each keeping what a real one would hold. */
function setup(
  failures: { annotation?: number; probeSet?: number },
  owns: (netns: NetnsHandle, ips: readonly string[]) => boolean = () => true,
  branchEni?: BranchEniProbeRules,
) {
  const netnsHandles: NetnsHandle[] = [];
  const probeSet = new Map<string, string>();
  const ztunnelKnows = new Set<string>();
  const ztunnelLog: string[] = [];
  const annotations = new Map<string, string | null>();
  let annotationFailuresLeft = failures.annotation ?? 0;
  let probeSetFailuresLeft = failures.probeSet ?? 0;
  const sets: ProbeSetManager = {
    create: async () => {},
    flush: async () => void probeSet.clear(),
    destroy: async () => void probeSet.clear(),
    list: async () => [...probeSet].map(([ip, uid]) => ({ family: 4 as const, ip, uid })),
    async addPod(uid, ips) {
      if (probeSetFailuresLeft > 0) {
        probeSetFailuresLeft--;
        throw new Error('ipset v7.17: Kernel error received: set type not supported');
      }
      for (const ip of ips) probeSet.set(ip, uid);
      return [...ips];
    },
    async removePod(uid, ips) {
      const removed = ips.filter((ip) => probeSet.get(ip) === uid);
      for (const ip of removed) probeSet.delete(ip);
      return { removed, keptForOtherPods: [] };
    },
    removeIp: async (ip) => void probeSet.delete(ip),
  };
  const ztunnel: ZtunnelServer = {
    path: '/fake/ztunnel.sock',
    start: () => {},
    async podAdded(uid) {
      ztunnelLog.push(`add:${uid}`);
      ztunnelKnows.add(uid);
    },
    async podDeleted(uid) {
      ztunnelLog.push(`del:${uid}`);
      ztunnelKnows.delete(uid);
    },
    connectionCount: () => 1,
    hasPod: (uid) => ztunnelKnows.has(uid),
    close: async () => {},
  };
  const annotator: PodAnnotator = {
    async annotate(namespace, name, key, value) {
      if (value === 'enabled' && annotationFailuresLeft > 0) {
        annotationFailuresLeft--;
        throw new KubeConnectionError(
          'PATCH /api/v1/namespaces/mesh/pods/app-0/status: socket hang up',
          new Error('socket hang up'),
          false,
        );
      }
      annotations.set(`${namespace}/${name} ${key}`, value);
    },
  };
  const cache = createPodNetnsCache();
  const dataplane = createNodeMeshDataplane({
    rules: { runner: createRecordingCommandRunner(), openScratchNetns: async () => ({ path: '/proc/99/ns/net', close: async () => {} }) },
    backend: {
      kind: 'iptables',
      iptables: { flavor: 'legacy', nfTables: false, version: { major: 1, minor: 8, patch: 9 }, binaries: iptablesBinaries('legacy') },
    },
    config: ambientConfigFromOptions({}),
    cache,
    async finder() {
      return {
        async findNetnsForPods(pods) {
          const netns = createNetnsHandle({
            fd: 900 + netnsHandles.length,
            inode: 4242 + netnsHandles.length,
            source: 'fake',
            path: '/proc/1234/fd/7',
            release: () => {},
          });
          netnsHandles.push(netns);
          return new Map([...pods].map(([uid, p]) => [uid, { pod: p, netns }]));
        },
      };
    },
    checkOwnership: async (netns, ips) => owns(netns, ips),
    netnsGuard: {
      openCniNetns: () => assert.fail('the procfs path is used'),
      check: () => {},
    },
    sets,
    ...(branchEni ? { branchEni } : {}),
    ztunnel,
    annotator,
    logger,
  });
  const annotation = () => annotations.get(`mesh/app-0 ambient.istio.io/redirection`);
  return { dataplane, cache, probeSet, ztunnelKnows, ztunnelLog, annotation, netnsHandles };
}

describe('ambient enrolment that cannot annotate the pod', () => {
  it('rolls back the hand-over (Del to ztunnel, probe entry removed, netns released) and answers retryable', async () => {
    const s = setup({ annotation: 1 });
    await assert.rejects(s.dataplane.addPodToMesh(pod, IPS, undefined), (err: unknown) => {
      assert.ok(err instanceof RetryableError, String(err));
      assert.match(err.message, /failed to annotate the pod: .*PATCH \/api\/v1\/namespaces\/mesh\/pods\/app-0\/status/);
      return true;
    });
    assert.deepEqual(s.ztunnelLog, [`add:${UID}`, `del:${UID}`], 'ztunnel was handed the pod, then told to forget it');
    assert.deepEqual([...s.ztunnelKnows], []);
    assert.deepEqual([...s.probeSet], [], 'no probe-set entry left behind');
    assert.equal(s.cache.has(UID), false, 'the pod left the netns cache');
    assert.equal(s.netnsHandles[0]?.closed, true, 'its netns handle was released');
    assert.equal(s.annotation(), undefined);
  });

  it('the retry then enrols the pod cleanly: one net Add, one probe entry, the annotation', async () => {
    const s = setup({ annotation: 1 });
    await assert.rejects(s.dataplane.addPodToMesh(pod, IPS, undefined), RetryableError);
    await s.dataplane.addPodToMesh(pod, IPS, undefined);
    assert.deepEqual(s.ztunnelLog, [`add:${UID}`, `del:${UID}`, `add:${UID}`]);
    assert.deepEqual([...s.ztunnelKnows], [UID]);
    assert.deepEqual([...s.probeSet], [[IPS[0], UID]]);
    assert.equal(s.cache.has(UID), true);
    assert.equal(s.cache.get(UID)?.closed, false);
    assert.equal(s.annotation(), 'enabled');
  });

  it('a probe-set failure after the hand-over is rolled back the same way', async () => {
    const s = setup({ probeSet: 1 });
    const addPod = s.dataplane;
    const realSets = s.probeSet;
    await assert.rejects(addPod.addPodToMesh(pod, IPS, undefined), /failed to add the pod to the host probe set/);
    assert.deepEqual(s.ztunnelLog, [`add:${UID}`, `del:${UID}`]);
    assert.equal(s.cache.has(UID), false);
    await addPod.addPodToMesh(pod, IPS, undefined);
    assert.deepEqual([...s.ztunnelKnows], [UID]);
    assert.deepEqual([...realSets], [[IPS[0], UID]]);
    assert.equal(s.annotation(), 'enabled');
  });
});

describe('ambient enrolment of a pod whose IPs changed', () => {
  it('keeps the held netns and adds the new IPs when that netns carries them', async () => {
    const s = setup({});
    await s.dataplane.addPodToMesh(pod, IPS, undefined);
    await s.dataplane.syncPodIps(pod, ['10.100.0.9']);
    assert.equal(s.netnsHandles.length, 1, 'no new lookup');
    assert.equal(s.cache.get(UID), s.netnsHandles[0]);
    assert.deepEqual(s.ztunnelLog, [`add:${UID}`]);
    assert.equal(s.probeSet.get('10.100.0.9'), UID);
  });

  it('enrols the new netns when the held one no longer carries them (sandbox re-created behind the agent)', async () => {
    const s = setup({}, (netns, ips) => netns !== s.netnsHandles[0] || ips.includes(IPS[0] as string));
    await s.dataplane.addPodToMesh(pod, IPS, undefined);
    assert.equal(s.dataplane.holdsNetns(UID), true);
    const moved = ['10.100.0.9'];
    await s.dataplane.syncPodIps({ ...pod, status: { phase: 'Running', podIP: '10.100.0.9', podIPs: [{ ip: '10.100.0.9' }] } }, moved);
    assert.equal(s.netnsHandles[0]?.closed, true, 'the old netns is released');
    assert.equal(s.cache.get(UID), s.netnsHandles[1], 'the one found by the new IPs is held');
    assert.deepEqual(s.ztunnelLog, [`add:${UID}`, `del:${UID}`, `add:${UID}`], 'ztunnel is given the new netns');
    assert.equal(s.probeSet.get('10.100.0.9'), UID);
    assert.equal(s.probeSet.has(IPS[0] as string), false, "the old IP's probe-set entry follows the pod");
    assert.equal(s.annotation(), 'enabled');
  });
});

describe('AWS branch ENI probe rules on enrolment', () => {
  /** Branch ENI rules as the host would hold them: every IP given is a branch ENI pod's. */
  function branchEniHost(fail = false) {
    const calls: string[] = [];
    const route = { table: 101, veth: 'vlan6fb1c5f2a4d', iifPriority: 10 };
    const rules: BranchEniProbeRules = {
      async addPod(ips) {
        calls.push(`add ${ips.join(',')}`);
        return ips.map((ip) => ({ ip, route, ...(fail ? { error: 'RTNETLINK answers: Operation not permitted' } : {}) }));
      },
      async removePod(ips) {
        calls.push(`remove ${ips.join(',')}`);
        return ips.map((ip) => ({ ip, route }));
      },
      flush: async () => [],
    };
    return { rules, calls };
  }
  const entries = (msg: string) => logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.msg === msg);

  it('adds them after the probe-set entry, removes them with it, and logs each naming the pod', async () => {
    logLines.length = 0;
    const eni = branchEniHost();
    const s = setup({}, undefined, eni.rules);
    await s.dataplane.addPodToMesh(pod, IPS, undefined);
    await s.dataplane.syncPodIps(pod, ['10.100.0.9']);
    await s.dataplane.removePodFromMesh(pod, true);
    assert.deepEqual(eni.calls, ['add 10.100.0.2', 'add 10.100.0.9', 'remove 10.100.0.2']);
    const added = entries('branch ENI pod: probe traffic routed over its veth');
    assert.equal(added.length, 2);
    assert.equal(added[0]?.pod, 'mesh/app-0');
    assert.equal(added[0]?.veth, 'vlan6fb1c5f2a4d');
    assert.equal(entries('branch ENI pod: probe rules removed')[0]?.pod, 'mesh/app-0');
  });

  it('a failure to add them is logged and the pod is enrolled anyway', async () => {
    logLines.length = 0;
    const s = setup({}, undefined, branchEniHost(true).rules);
    await s.dataplane.addPodToMesh(pod, IPS, undefined);
    assert.equal(s.annotation(), 'enabled');
    const [failed] = entries("failed to add branch ENI probe rules; the pod's kubelet probes may fail");
    assert.equal(failed?.pod, 'mesh/app-0');
    assert.match(String(failed?.error), /Operation not permitted/);
  });
});
