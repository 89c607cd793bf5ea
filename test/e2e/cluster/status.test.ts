// CNI STATUS never flaps a node: a two-node cluster whose primary conflist is cniVersion 1.1.0, so
// containerd 2.x runs istio-cni's STATUS on every CRI status call (kubelet's, every ~5 s per node,
// and each `crictl info` here). Each Node's Ready (API) and containerd's NetworkReady are sampled
// every 500 ms through a DaemonSet rollout restart, the agent SIGKILLed, and a node restart that
// empties the run dir as a reboot does. docs/architecture.md ("Degraded mode", STATUS) states the rule.
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import type { KubeClient } from '../support/kubeClient.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { bringUp, DAEMONSET, describeNamespace, restartDaemonSet, waitDaemonSetReady, type LocalCluster } from './localCluster.ts';
import { restartNode, type RunningNode } from './node.ts';
import { notReady, sampleReadiness, summarizeSamples, type ReadinessSample } from './readinessSamples.ts';
import { loadState } from './state.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { tearDown } from './teardown.ts';
import { container, isReady, NOWHERE, probeOnce, serve, validationContainer, waitFor, whenListening, type Pod } from './workloads.ts';

const IMAGE = SUITE_IMAGE;
const IMAGE_ARCHIVE = SUITE_IMAGE_ARCHIVE;
const NS = 'e2e-status';
const SAMPLE_EVERY_MS = 500;
/** A sidecar pod is created this often during each event, and twice more after it. */
const CHURN_INTERVAL_MS = 1_000;
const CHURN_MAX = 60;

const preferNode = (name: string) => ({
  nodeAffinity: {
    preferredDuringSchedulingIgnoredDuringExecution: [
      { weight: 100, preference: { matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [name] }] } },
    ],
  },
});

describe('CNI STATUS on containerd 2.x with a 1.1.0 primary conflist: the node never flaps', { timeout: 1_500_000 }, () => {
  let cluster: LocalCluster;
  const api = (): KubeClient => cluster.controlPlane.api;
  const node1 = (): RunningNode => {
    const node = cluster.nodes[0];
    assert.ok(node !== undefined);
    return node;
  };
  const agentPods = async (): Promise<Pod[]> =>
    (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)).items;
  const agentOn = async (nodeName: string) =>
    (await agentPods()).find((p) => p.spec.nodeName === nodeName && p.metadata.deletionTimestamp === undefined);
  const agentRestarts = (pod: Pod | undefined) => pod?.status?.containerStatuses?.find((c) => c.name === 'install-cni')?.restartCount ?? 0;

  /** A sidecar pod with istio-validation (as injected in CNI mode), pinned to nodeName, or (undefined) schedulable on either node with node 1 preferred. */
  const sidecarPod = (name: string, nodeName: string | undefined) =>
    api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS, annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
      spec: {
        ...(nodeName === undefined ? { affinity: preferNode(node1().layout.name) } : { nodeName }),
        terminationGracePeriodSeconds: 1,
        initContainers: [validationContainer()],
        containers: [
          container('istio-proxy', serve(15001, 'proxy-15001'), 1337),
          container('outbound', whenListening(15001, 'proxy-15001', probeOnce(NOWHERE, 80))),
        ],
      },
    });

  /** Creates sidecar pods every CHURN_INTERVAL_MS until stopped, then two more. */
  const churn = (prefix: string, nodeName: string | undefined) => {
    const names: string[] = [];
    let stopping = false;
    const creating = (async () => {
      for (let extra = 0; extra < 2 && names.length < CHURN_MAX; ) {
        const name = `${prefix}-${names.length}`;
        await sidecarPod(name, nodeName);
        names.push(name);
        await sleep(CHURN_INTERVAL_MS);
        if (stopping) extra++;
      }
    })();
    return {
      async stop(): Promise<string[]> {
        stopping = true;
        await creating;
        return names;
      },
    };
  };

  /** Every pod Ready and its outbound connection captured (answered by its proxy on 15001). */
  const assertCaptured = async (names: readonly string[]): Promise<Pod[]> => {
    const pods: Pod[] = [];
    for (const name of names) {
      pods.push(
        await waitFor(
          `pod ${NS}/${name} Ready`,
          async () => {
            const pod = await api().must<Pod>('GET', `/api/v1/namespaces/${NS}/pods/${name}`);
            return isReady(pod) ? pod : undefined;
          },
          240_000,
          () => describeNamespace(cluster.controlPlane, NS),
        ),
      );
      const said = await waitFor(
        `${name}/outbound printing an answer line`,
        async () =>
          (await api().request('GET', `/api/v1/namespaces/${NS}/pods/${name}/log?container=outbound`)).text
            .split('\n')
            .find((l) => l.startsWith('answer:'))
            ?.slice('answer:'.length),
        60_000,
      );
      assert.equal(said, 'proxy-15001', `${name} was captured`);
    }
    return pods;
  };

  /** Samples readiness and creates sidecar pods (on nodeName, or unpinned) while `event` runs. */
  const duringEvent = async (prefix: string, nodeName: string | undefined, event: () => Promise<void>) => {
    const sampler = sampleReadiness(api(), cluster.nodes, SAMPLE_EVERY_MS);
    const pods = churn(prefix, nodeName);
    try {
      await event();
    } finally {
      await pods.stop();
      // Always: a sampler left running would keep the test process alive.
      await sampler.stop();
    }
    return { samples: await sampler.stop(), names: await pods.stop() };
  };
  /** Every pod captured and no sample reporting a node not ready. */
  const assertNeverNotReady = async (t: TestContext, event: string, samples: readonly ReadinessSample[], names: readonly string[]) => {
    await assertCaptured(names);
    report(t, event, samples, names, firstNotReady(samples));
    assert.deepEqual(samples.filter(notReady), [], `no sample reports a node not ready (${event})`);
  };
  const report = (t: TestContext, event: string, samples: readonly ReadinessSample[], pods: readonly string[], extra = '') =>
    t.diagnostic(`${event}: ${summarizeSamples(samples)}; ${pods.length} sidecar pods created, all Ready and captured${extra}`);
  const firstNotReady = (samples: readonly ReadinessSample[]) => {
    const s = samples.find(notReady);
    return s === undefined ? '' : `; first not ready: ${s.node} ready=${s.ready} NetworkReady=${s.networkReady} ${s.networkMessage}`;
  };

  before(async () => {
    cluster = await bringUp({ nodes: 2, image: IMAGE, imageTar: IMAGE_ARCHIVE, primaryCniVersion: '1.1.0' });
    await api().must('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await waitFor(
      `the default service account in ${NS}`,
      async () => ((await api().request('GET', `/api/v1/namespaces/${NS}/serviceaccounts/default`)).status === 200 ? true : undefined),
      60_000,
    );
  });

  after(async () => {
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('0 idle: every node Ready and NetworkReady with the agents up (STATUS runs and answers 0)', async (t) => {
    const sampler = sampleReadiness(api(), cluster.nodes, SAMPLE_EVERY_MS);
    await sleep(6_000);
    const samples = await sampler.stop();
    t.diagnostic(`idle 6 s: ${summarizeSamples(samples)}`);
    assert.ok(samples.length > 0);
    assert.deepEqual(
      samples.filter((s) => s.ready !== 'True' || s.networkReady !== true),
      [],
      'every sample Ready',
    );
  });

  it('1 DaemonSet rollout restart: no sample reports a node not ready; sidecar pods created throughout end Running and captured', {
    timeout: 600_000,
  }, async (t) => {
    const oldPods = new Set((await agentPods()).map((p) => p.metadata.name));
    const { samples, names } = await duringEvent('sidecar-rollout', node1().layout.name, async () => {
      await restartDaemonSet(cluster.controlPlane);
      await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
      await waitFor(
        `every ${DAEMONSET} pod replaced and Ready`,
        async () => {
          const now = await agentPods();
          return now.length === cluster.nodes.length && now.every((p) => !oldPods.has(p.metadata.name) && isReady(p)) ? true : undefined;
        },
        180_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
    });
    await assertNeverNotReady(t, 'rollout restart', samples, names);
  });

  it('2 agent SIGKILLed on node 1 (kubelet restarts it): no sample reports a node not ready; sidecar pods created meanwhile end captured', {
    timeout: 600_000,
  }, async (t) => {
    const node = node1();
    const before = await agentOn(node.layout.name);
    assert.ok(before !== undefined);
    const { samples, names } = await duringEvent('sidecar-killed', node.layout.name, async () => {
      const id = (await node.crictl(['ps', '--name', '^install-cni$', '-q'])).trim();
      assert.match(id, /^[0-9a-f]{64}$/, `one running install-cni container on ${node.layout.name}`);
      await node.crictl(['stop', '--timeout', '0', id]);
      await waitFor(
        `${DAEMONSET} on ${node.layout.name} restarted by kubelet and Ready`,
        async () => {
          const pod = (await agentPods()).find((p) => p.metadata.name === before.metadata.name);
          return pod !== undefined && agentRestarts(pod) > agentRestarts(before) && isReady(pod) ? true : undefined;
        },
        120_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
    });
    await assertNeverNotReady(t, 'agent killed', samples, names);
  });

  it('3 node 1 restarted (kubelet, agent and containerd stopped, run dir emptied): kubelet starts the agent again, the node ends Ready; NotReady only while the agent runs unready, no sandbox on node 1 meanwhile; every pod captured', {
    timeout: 600_000,
  }, async (t) => {
    const node = node1();
    const name = node.layout.name;
    const state = loadState();
    assert.ok(state !== undefined, 'the cluster state');
    const agentBefore = await agentOn(name);
    const stoppedAt = Date.now();
    let startedAt = 0;
    // Not pinned: the scheduler may place them on either node (node 1 preferred), on node 1 while
    // the API still says Ready.
    const { samples, names } = await duringEvent('sidecar-reboot', undefined, async () => {
      await restartNode(state, node, cluster.controlPlane, ['install-cni']);
      startedAt = Date.now();
      await waitFor(
        `${name} Ready and NetworkReady again, its agent restarted by kubelet and Ready`,
        async () => {
          const agent = await agentOn(name);
          const ready = (
            await api().must<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', `/api/v1/nodes/${name}`)
          ).status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
          const info = JSON.parse(await node.crictl(['info'])) as { status?: { conditions?: { type: string; status: boolean }[] } };
          const networkReady = info.status?.conditions?.some((c) => c.type === 'NetworkReady' && c.status);
          return ready === true &&
            networkReady === true &&
            agent !== undefined &&
            agentRestarts(agent) > agentRestarts(agentBefore) &&
            isReady(agent)
            ? true
            : undefined;
        },
        180_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
      await sleep(2 * SAMPLE_EVERY_MS);
    });
    const captured = await assertCaptured(names);

    const mine = samples.filter((s) => s.node === name && s.at >= stoppedAt);
    const notReadySamples = mine.filter(notReady);
    const lastNotReady = notReadySamples.at(-1);
    const firstNotReadySample = notReadySamples[0];
    const unreachable = mine.filter((s) => s.networkReady === undefined);
    const windowS =
      firstNotReadySample === undefined || lastNotReady === undefined
        ? 0
        : (lastNotReady.at - firstNotReadySample.at + SAMPLE_EVERY_MS) / 1000;
    const onNode1 = captured.filter((p) => p.spec.nodeName === name).map((p) => p.metadata.name);
    const sandboxes = JSON.parse(await node.crictl(['pods', '--namespace', NS, '-o', 'json'])) as {
      items: { metadata: { name: string }; createdAt: string }[];
    };
    const created = sandboxes.items
      .filter((s) => names.includes(s.metadata.name))
      .map((s) => ({ pod: s.metadata.name, at: Number(BigInt(s.createdAt) / 1_000_000n) }))
      .filter((s) => s.at >= stoppedAt);
    const firstSandbox = Math.min(...created.map((s) => s.at));
    const events = await api().must<{ items: { involvedObject?: { name?: string }; count?: number }[] }>(
      'GET',
      `/api/v1/namespaces/${NS}/events?fieldSelector=${encodeURIComponent('reason=FailedCreatePodSandBox')}`,
    );
    const failedSandboxes = events.items
      .filter((e) => names.includes(e.involvedObject?.name ?? ''))
      .reduce((sum, e) => sum + (e.count ?? 1), 0);
    report(
      t,
      'node restart',
      samples.filter((s) => s.at >= stoppedAt),
      names,
      `; ${name}: CRI down ${unreachable.length} samples, not ready for ${windowS.toFixed(1)} s (${notReadySamples.length} samples, ` +
        `from ${(((firstNotReadySample?.at ?? stoppedAt) - stoppedAt) / 1000).toFixed(1)} s after the stop began; containerd and kubelet ` +
        `were up again ${((startedAt - stoppedAt) / 1000).toFixed(1)} s after it), ` +
        `${onNode1.length} of the pods scheduled to ${name}, ${created.length} sandboxes created there after the stop, the first ` +
        `${created.length === 0 ? '-' : `${((firstSandbox - (lastNotReady?.at ?? startedAt)) / 1000).toFixed(1)} s after ${lastNotReady === undefined ? 'containerd and kubelet were up again' : 'the last not-ready sample'}`}; ` +
        `${failedSandboxes} failed sandbox creation(s) among them` +
        firstNotReady(samples.filter((s) => s.at >= stoppedAt)),
    );

    // STATUS fails only while an agent runs and is not ready yet: with none answering, kubelet must
    // be able to start it (a pod-network pod, which kubelet never starts on a network-not-ready node).
    assert.deepEqual(
      mine.filter((s) => s.networkReady === false && !s.networkMessage.includes('istio-cni node agent is not ready')),
      [],
      `${name}: NetworkReady=false only while its agent ran and was not ready`,
    );
    const tail = mine.at(-1);
    assert.ok(
      tail !== undefined && tail.ready === 'True' && tail.networkReady === true,
      `${name} Ready at the end: ${JSON.stringify(tail)}`,
    );
    assert.deepEqual(
      created.filter((s) => lastNotReady !== undefined && s.at <= lastNotReady.at),
      [],
      `no sandbox created on ${name} before its last not-ready sample`,
    );
    // The other node never flapped.
    assert.deepEqual(
      samples.filter((s) => s.node !== name && notReady(s)),
      [],
      'the other node stayed ready',
    );
  });
});
