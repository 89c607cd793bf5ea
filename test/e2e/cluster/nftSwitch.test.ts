// NATIVE_NFTABLES switched on a live kubelet node (`helm upgrade --set global.nativeNftables=…` and
// the rollout restart an operator runs), each case on a one-node cluster of its own (verification
// every 5 s): pods run through each switch and several verification passes. An ambient node's host
// state (the iptables probe ipset, or the nft host table) keeps the whole node on its backend, sidecar
// pods included, until a reboot; a sidecar-only node has nothing naming a backend, so new pods take
// the new setting while running ones keep theirs. Either way every pod ends with exactly one
// backend's rules, the node with one backend's host rules and sets, traffic captured and probes
// passing. docs/architecture.md ("Switching NATIVE_NFTABLES on a live node") states the behaviour.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startFakeZtunnel, type FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { auditFailures, auditTable } from '../support/podAudit.ts';
import { podRuleDumps } from '../support/pods.ts';
import { runCommand } from '../support/runCommand.ts';
import { collectAudit, podNetnsPaths } from './audit.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { hostPort, SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { bringUp, clusterNode, DAEMONSET, describeNamespace, type LocalCluster } from './localCluster.ts';
import { nodePrivateDir, type RunningNode } from './node.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';
import { upgradeWith } from './upgradeProfile.ts';
import {
  container,
  createNamespace,
  probedHttpServer,
  isReady,
  NOWHERE,
  probeLoop,
  serve,
  waitFor,
  type Pod,
  waitPodReady,
} from './workloads.ts';

const NS = 'e2e-nft-switch';
const AMBIENT_NS = 'e2e-nft-switch-ambient';
const PASSES = 3;

type Backend = 'iptables' | 'nft';
const nativeNftables = (b: Backend) => `global.nativeNftables=${b === 'nft'}`;

/** Which backends hold ISTIO state in a pod netns: iptables chains (either flavour, either family) or an `istio-*` nft table. */
async function podBackends(netns: string): Promise<Backend[]> {
  const dumps = await podRuleDumps(netns);
  const found: Backend[] = [];
  if (/^:ISTIO_/m.test(`${dumps.iptables}\n${dumps.ip6tables}`)) found.push('iptables');
  if (/^table inet istio-/m.test(dumps.nft)) found.push('nft');
  return found;
}

/** Which backends hold ambient host state in the node's netns: the probe ipsets and `ISTIO_POSTRT`, or the `inet istio-ambient-nat` table. */
async function hostBackends(node: RunningNode): Promise<Backend[]> {
  const inNode = async (argv: readonly string[]) =>
    (await runCommand(['ip', 'netns', 'exec', node.layout.netns, ...argv], { allowFailure: true })).stdout;
  const ipsets = await inNode(['ipset', 'list', '-n']);
  const iptables = `${await inNode(['iptables-nft-save', '-t', 'nat'])}\n${await inNode(['iptables-legacy-save', '-t', 'nat'])}`;
  const nft = await inNode(['nft', 'list', 'tables']);
  const found: Backend[] = [];
  if (/istio-inpod-probes/.test(ipsets) || /^:ISTIO_POSTRT /m.test(iptables)) found.push('iptables');
  if (/^table inet istio-ambient-nat$/m.test(nft)) found.push('nft');
  return found;
}

/**
 * Each case on a one-node cluster of its own: an ambient node flipped once each way (it stays on its
 * backend, sidecar pods included), and a sidecar-only node flipped there and back (new sidecar pods
 * take the setting, running ones keep theirs).
 */
const CASES: { ambient: boolean; start: Backend; switches: Backend[] }[] = [
  { ambient: true, start: 'iptables', switches: ['nft'] },
  { ambient: true, start: 'nft', switches: ['iptables'] },
  { ambient: false, start: 'iptables', switches: ['nft', 'iptables'] },
];

for (const { ambient, start, switches } of CASES) {
  const kind = ambient ? 'ambient node' : 'sidecar-only node';
  describe(`[${kind}: ${[start, ...switches].join(' → ')}] NATIVE_NFTABLES switched on a live kubelet node`, { timeout: 600_000 }, () => {
    let cluster: LocalCluster;
    let ztunnel: FakeZtunnel | undefined;
    const api = () => cluster.controlPlane.api;
    const node = (): RunningNode => clusterNode(cluster, 0);
    const getPod = (name: string, namespace: string) => api().must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
    const waitReady = (name: string, namespace: string) => waitPodReady(cluster.controlPlane, name, namespace);
    const sidecarPod = async (name: string) => {
      await api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: NS, annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
        spec: {
          nodeName: node().layout.name,
          terminationGracePeriodSeconds: 1,
          containers: [container('istio-proxy', serve(15001, 'proxy-15001'), 1337), container('outbound', probeLoop(NOWHERE, 80))],
        },
      });
      return waitReady(name, NS);
    };
    /** An ambient pod Ready only through the node's probe SNAT (in-pod rules send kubelet's probe to ztunnel's port otherwise). */
    const ambientPod = async (name: string) => {
      await api().must('POST', `/api/v1/namespaces/${AMBIENT_NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: AMBIENT_NS },
        spec: {
          nodeName: node().layout.name,
          terminationGracePeriodSeconds: 1,
          containers: [probedHttpServer()],
        },
      });
      return waitReady(name, AMBIENT_NS);
    };
    /** The last few `tick:` answers of a sidecar pod's outbound loop, once it printed more than `after` of them. */
    const ticksAfter = async (name: string, seen: number) =>
      waitFor(
        `${NS}/${name}: 3 more outbound ticks`,
        async () => {
          const log = (await api().request('GET', `/api/v1/namespaces/${NS}/pods/${name}/log?container=outbound`)).text;
          const ticks = log
            .split('\n')
            .filter((l) => l.startsWith('tick:'))
            .map((l) => l.split(':').slice(2).join(':'));
          return ticks.length >= seen + 3 ? ticks.slice(seen) : undefined;
        },
        60_000,
      );
    const tickCount = async (name: string) =>
      (await api().request('GET', `/api/v1/namespaces/${NS}/pods/${name}/log?container=outbound`)).text
        .split('\n')
        .filter((l) => l.startsWith('tick:')).length;
    const backendsOf = async (p: Pod) => {
      const netns = (await podNetnsPaths(node())).get(p.metadata.uid);
      assert.ok(netns !== undefined, `${p.metadata.name}: a ready sandbox`);
      return podBackends(netns);
    };
    const verifications = async (): Promise<number> => {
      const agent = (
        await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)
      ).items.find((p) => p.metadata.deletionTimestamp === undefined && isReady(p));
      const ip = agent?.status?.podIP;
      if (ip === undefined) return 0;
      const text = await (await fetch(`http://${hostPort(ip, 15014)}/metrics`)).text();
      let total = 0;
      for (const m of text.matchAll(/^istio_cni_pod_verifications_total\{[^}]*\} (\d+)$/gm)) total += Number(m[1]);
      return total;
    };
    const connectZtunnel = async () => {
      ztunnel?.close();
      const path = join(nodePrivateDir(node().layout, '/run/ztunnel'), 'ztunnel.sock');
      ztunnel = await waitFor(
        `a ZDS connection to ${path}`,
        async () => startFakeZtunnel({ path }).catch(() => undefined),
        120_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
    };
    const auditClean = async () => {
      const rows = await collectAudit({ api: api(), node: node(), namespaces: [NS, AMBIENT_NS], ambientEnabled: ambient, ztunnel });
      assert.deepEqual(auditFailures(rows), [], auditTable(rows));
    };

    before(async () => {
      cluster = await bringUp({
        nodes: 1,
        image: SUITE_IMAGE,
        imageTar: SUITE_IMAGE_ARCHIVE,
        chartSet: [...(ambient ? ['profile=ambient'] : []), 'verify.interval=5s', nativeNftables(start)],
      });
      await createNamespace(api(), NS);
      await createNamespace(api(), AMBIENT_NS, { 'istio.io/dataplane-mode': 'ambient' });
      if (ambient) await connectZtunnel();
    });

    after(async () => {
      ztunnel?.close();
      const state = loadState();
      if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
    });

    it(`pods captured with ${start}, the agent restarted with ${switches.join(', then ')}, ${PASSES} verification passes each time: one backend per pod and on the node, traffic captured${ambient ? ', probes passing' : ''}; new pods ${ambient ? "on the node's backend" : 'on the new setting'}`, async (t) => {
      // Each pod with the backend it must keep for good.
      const sidecars: { pod: Pod; backend: Backend }[] = [{ pod: await sidecarPod('sidecar-0'), backend: start }];
      const ambients: { pod: Pod; backend: Backend }[] = ambient ? [{ pod: await ambientPod('ambient-0'), backend: start }] : [];
      const check = async (stage: string) => {
        for (const { pod, backend } of [...sidecars, ...ambients]) {
          assert.deepEqual(await backendsOf(pod), [backend], `${stage}: ${pod.metadata.name} holds its capture in ${backend} only`);
        }
        assert.deepEqual(await hostBackends(node()), ambient ? [start] : [], `${stage}: the node's host rules and sets`);
        for (const { pod } of ambients)
          assert.ok(isReady(await getPod(pod.metadata.name, AMBIENT_NS)), `${stage}: ${pod.metadata.name} Ready`);
        await auditClean();
      };
      await check(`with ${start}`);
      for (const [i, setting] of switches.entries()) {
        const stage = `after the switch to ${setting}`;
        const seen = new Map<string, number>();
        for (const { pod } of sidecars) seen.set(pod.metadata.name, await tickCount(pod.metadata.name));
        await upgradeWith(cluster, [nativeNftables(setting)]);
        if (ambient) await connectZtunnel();
        const checked = await verifications();
        await waitFor(
          `${PASSES} verification passes over every pod ${stage}`,
          async () => ((await verifications()) >= checked + PASSES * (sidecars.length + ambients.length) ? true : undefined),
          120_000,
        );
        // The node's backend for new pods: an ambient node's host state keeps it; a sidecar-only node takes the setting.
        const onNode: Backend = ambient ? start : setting;
        sidecars.push({ pod: await sidecarPod(`sidecar-${i + 1}`), backend: onNode });
        if (ambient) ambients.push({ pod: await ambientPod(`ambient-${i + 1}`), backend: onNode });
        await check(stage);
        for (const { pod } of sidecars) {
          const answers = await ticksAfter(pod.metadata.name, seen.get(pod.metadata.name) ?? 0);
          assert.deepEqual([...new Set(answers)], ['proxy-15001'], `${stage}: ${pod.metadata.name}'s outbound still captured`);
        }
      }
      for (const { pod } of sidecars) {
        const restarts = (await getPod(pod.metadata.name, NS)).status?.containerStatuses?.reduce((n, c) => n + c.restartCount, 0);
        assert.equal(restarts, 0, `no container of ${pod.metadata.name} restarted`);
      }
      t.diagnostic(
        `pods and their backends: ${[...sidecars, ...ambients].map(({ pod, backend }) => `${pod.metadata.name} ${backend}`).join(', ')}`,
      );
    });
  });
}
