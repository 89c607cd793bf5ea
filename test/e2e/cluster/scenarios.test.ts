// The cluster scenarios on the cluster `make up` starts (two nodes, the node image from IMAGE_ARCHIVE,
// the chart's default values until scenario 7 reinstalls it with the readiness taint and scenario 3
// upgrades it to ambient), driven through the Kubernetes API: pods are created in the API and run by
// kubelet; what they saw comes back through their logs. Run in the order written.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startFakeZtunnel, type FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import type { KubeClient } from '../support/kubeClient.ts';
import { podRules, probeTraffic, type StartedPod } from '../support/pods.ts';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { SIDECAR_STATUS } from './examples.ts';
import {
  bringUp,
  DAEMONSET,
  describeNamespace,
  helm,
  helmInstall,
  restartDaemonSet,
  waitDaemonSetReady,
  type LocalCluster,
} from './localCluster.ts';
import { nodePrivateDir, nodeProcPath, type RunningNode, runningContainerProcPath } from './node.ts';
import { loadState } from './state.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { tearDown } from './teardown.ts';
import {
  container,
  isReady,
  linesNamingPod,
  NOWHERE,
  probe,
  probeLoop,
  probeOnce,
  serve,
  summarizeUpgradeFailures,
  watchGaps,
  validationContainer,
  waitFor,
  whenListening,
  type Pod,
  type SandboxFailureEvent,
  createNamespace as createNamespaceAndWait,
} from './workloads.ts';

const NODES = 2;
const IMAGE = SUITE_IMAGE;
const IMAGE_ARCHIVE = SUITE_IMAGE_ARCHIVE;
const NS = 'e2e-cluster';
const AMBIENT_NS = 'e2e-cluster-ambient';
const DATAPLANE_MODE = 'istio.io/dataplane-mode';
const REDIRECTION = 'ambient.istio.io/redirection';
const READINESS_TAINT = 'cni.istio.io/not-ready';
/** Scenario 4 creates a sidecar pod this often while the agents are replaced (at most CHURN_MAX). */
const CHURN_INTERVAL_MS = 1_000;
const CHURN_MAX = 40;

type Taint = { key: string; value?: string; effect: string };

describe('istio-cni on a kubelet cluster', { timeout: 1_500_000 }, () => {
  let cluster: LocalCluster;
  const ztunnels = new Map<string, FakeZtunnel>();
  const api = (): KubeClient => cluster.controlPlane.api;
  const nodeNamed = (index: number): RunningNode => {
    const node = cluster.nodes[index];
    assert.ok(node !== undefined, `node ${index + 1} of ${cluster.nodes.length}`);
    return node;
  };

  const createNamespace = (name: string, labels: Record<string, string> = {}) => createNamespaceAndWait(api(), name, labels);
  const createPod = async (
    name: string,
    nodeName: string,
    containers: unknown[],
    options: { annotations?: Record<string, string>; namespace?: string; initContainers?: unknown[]; hostUsers?: false } = {},
  ): Promise<void> => {
    const { annotations = {}, namespace = NS, initContainers = [] } = options;
    await api().must('POST', `/api/v1/namespaces/${namespace}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace, annotations },
      spec: {
        nodeName,
        terminationGracePeriodSeconds: 1,
        initContainers,
        containers,
        ...(options.hostUsers === false ? { hostUsers: false } : {}),
      },
    });
  };
  const getPod = (name: string, namespace = NS) => api().must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
  const waitPod = async (name: string, ready: (pod: Pod) => boolean, what: string, timeoutMs = 120_000, namespace = NS): Promise<Pod> =>
    waitFor(
      `pod ${namespace}/${name} ${what}`,
      async () => {
        const pod = await getPod(name, namespace);
        return ready(pod) ? pod : undefined;
      },
      timeoutMs,
      () => describeNamespace(cluster.controlPlane, namespace),
    );
  /** The `answer:` line a probe container printed. */
  const answer = async (pod: string, containerName: string, timeoutMs = 60_000): Promise<string> => {
    let last = '';
    return waitFor(
      `${pod}/${containerName} printing an answer line`,
      async () => {
        const res = await api().request('GET', `/api/v1/namespaces/${NS}/pods/${pod}/log?container=${containerName}`);
        last = `log ${res.status}: ${res.text.slice(0, 1000)}`;
        return res.text
          .split('\n')
          .find((l) => l.startsWith('answer:'))
          ?.slice('answer:'.length);
      },
      timeoutMs,
      async () => `${last}\n${await describeNamespace(cluster.controlPlane, NS)}`,
    );
  };
  const agentPods = async (): Promise<Pod[]> =>
    (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)).items;
  const agentPodOn = async (nodeName: string): Promise<Pod> => {
    const pod = (await agentPods()).find((p) => p.spec.nodeName === nodeName && p.metadata.deletionTimestamp === undefined);
    assert.ok(pod !== undefined, `an ${DAEMONSET} pod on ${nodeName}`);
    return pod;
  };
  const agentLog = async (pod: string, previous: boolean): Promise<string> =>
    (
      await api().request(
        'GET',
        `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${pod}/log?container=install-cni${previous ? '&previous=true' : ''}`,
      )
    ).text;
  /**
   * A sidecar-style pod: its "proxy" answers on 15001; `outbound` runs once it does. With
   * `validation`, istio-validation runs first, as in an injected pod.
   */
  const sidecarPod = (name: string, nodeName: string, outbound: string, options: { validation?: boolean } = {}) =>
    createPod(
      name,
      nodeName,
      [container('istio-proxy', serve(15001, 'proxy-15001'), 1337), container('outbound', whenListening(15001, 'proxy-15001', outbound))],
      {
        annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS },
        initContainers: options.validation === true ? [validationContainer()] : [],
      },
    );
  /** What each `tick:` line of a probeLoop container said, in order. */
  const ticks = async (pod: string, containerName: string): Promise<string[]> => {
    const res = await api().request('GET', `/api/v1/namespaces/${NS}/pods/${pod}/log?container=${containerName}`);
    return res.text
      .split('\n')
      .filter((l) => l.startsWith('tick:'))
      .map((l) => l.split(':').slice(2).join(':'));
  };
  const conflistTypes = (node: RunningNode): string[] =>
    (
      JSON.parse(readFileSync(join(node.layout.dir, 'cni/net.d/10-bridge.conflist'), 'utf8')) as { plugins: { type: string }[] }
    ).plugins.map((p) => p.type);
  const nodeTaints = async (nodeName: string): Promise<Taint[]> =>
    (await api().must<{ spec: { taints?: Taint[] } }>('GET', `/api/v1/nodes/${nodeName}`)).spec.taints ?? [];
  /** Every agent pod replaced (none of `oldPods` left) and Ready, one per node. */
  const waitAgentsReplaced = (oldPods: ReadonlySet<string>) =>
    waitFor(
      `every ${DAEMONSET} pod replaced and Ready`,
      async () => {
        const pods = await agentPods();
        return pods.length === cluster.nodes.length && pods.every((p) => !oldPods.has(p.metadata.name) && isReady(p)) ? true : undefined;
      },
      180_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );

  before(async () => {
    cluster = await bringUp({ nodes: NODES, image: IMAGE, imageTar: IMAGE_ARCHIVE });
    await createNamespace(NS);
  });

  after(async () => {
    for (const zt of ztunnels.values()) zt.close();
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('1 install: the DaemonSet runs on every node, under the runtime seccomp profile; its installer copied the plugin into the node CNI bin dir and chained it last', async () => {
    const pods = await agentPods();
    assert.deepEqual(pods.map((p) => p.spec.nodeName).sort(), cluster.nodes.map((n) => n.layout.name).sort());
    assert.ok(pods.every(isReady), 'every istio-cni-node pod is Ready');
    const plugin = readFileSync(join(REPO_ROOT, 'dist/istio-cni'));
    for (const node of cluster.nodes) {
      const binDir = join(node.layout.dir, 'cni/bin');
      assert.ok(
        readFileSync(join(binDir, 'istio-cni')).equals(plugin),
        `${node.layout.name}: the node's istio-cni is the image's (dist/istio-cni)`,
      );
      assert.deepEqual(conflistTypes(node), ['bridge', 'portmap', 'istio-cni'], `${node.layout.name}: chained after the primary plugins`);
      // The chart's seccompProfile RuntimeDefault: the agent runs (and got Ready) under a seccomp filter.
      const status = readFileSync(`${await runningContainerProcPath(node, 'install-cni')}/status`, 'utf8');
      assert.match(status, /^Seccomp:\s+2$/m, `${node.layout.name}: the agent runs in seccomp filter mode`);
    }
  });

  it('2 sidecar pod: outbound reaches 15001, inbound from another node reaches 15006; a plain pod is untouched', async () => {
    const [node1, node2] = [nodeNamed(0).layout.name, nodeNamed(1).layout.name];
    await createPod('plain-server', node1, [container('app', serve(8080, 'plain-8080'))]);
    await createPod(
      'sidecar',
      node1,
      [
        container('app', serve(8080, 'app-8080')),
        // The proxy's uid is exempt from capture; it names the port a captured connection arrived on.
        container('istio-proxy', `${serve(15001, 'proxy-15001')} & ${serve(15006, 'proxy-15006')} & wait`, 1337),
        container('outbound', probe(NOWHERE, 80)),
      ],
      { annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
    );
    const plain = await waitPod('plain-server', isReady, 'Ready');
    const sidecar = await waitPod('sidecar', isReady, 'Ready');
    assert.equal(await answer('sidecar', 'outbound'), 'proxy-15001');

    await createPod('client', node2, [
      container('to-sidecar', probe(sidecar.status?.podIP ?? '', 8080)),
      container('to-plain', probe(plain.status?.podIP ?? '', 8080)),
    ]);
    assert.equal(await answer('client', 'to-sidecar'), 'proxy-15006');
    assert.equal(await answer('client', 'to-plain'), 'plain-8080');
  });

  it("2 a hostUsers: false sidecar pod (kubelet gives it a user namespace, containerd its netns inside it): captured, the proxy's uid exempt", async () => {
    const [node1, node2] = [nodeNamed(0).layout.name, nodeNamed(1).layout.name];
    await createPod(
      'sidecar-userns',
      node1,
      [
        container('app', serve(8080, 'app-8080')),
        container('istio-proxy', `${serve(15001, 'proxy-15001')} & ${serve(15006, 'proxy-15006')} & wait`, 1337),
        container('outbound', probe(NOWHERE, 80)),
        // The proxy's own uid, as the pod sees it, goes out uncaptured: nothing answers there.
        container('proxy-outbound', probeOnce(NOWHERE, 80), 1337),
      ],
      { annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS }, hostUsers: false },
    );
    const pod = await waitPod('sidecar-userns', isReady, 'Ready');
    assert.equal(pod.spec.hostUsers, false, 'the API server kept the field (UserNamespacesSupport on)');
    assert.equal(await answer('sidecar-userns', 'outbound'), 'proxy-15001');
    assert.equal(await answer('sidecar-userns', 'proxy-outbound'), 'none');
    await createPod('client-userns', node2, [container('to-sidecar', probe(pod.status?.podIP ?? '', 8080))]);
    assert.equal(await answer('client-userns', 'to-sidecar'), 'proxy-15006');
  });

  it("8 two nodes: each node's agent programs its own node's pods and never names the other node's", async () => {
    const [node1, node2] = [nodeNamed(0).layout.name, nodeNamed(1).layout.name];
    await sidecarPod('sidecar-node2', node2, probe(NOWHERE, 80));
    assert.equal(await answer('sidecar-node2', 'outbound'), 'proxy-15001');
    const logOn = async (nodeName: string) => agentLog((await agentPodOn(nodeName)).metadata.name, false);
    const [log1, log2] = [await logOn(node1), await logOn(node2)];
    const programmed = (log: string, pod: string) => linesNamingPod(log, NS, pod).some((l) => l.includes('sidecar capture programmed'));
    assert.ok(programmed(log1, 'sidecar'), `${node1}'s agent programmed ${NS}/sidecar (its log: ${log1.slice(-2000)})`);
    assert.ok(programmed(log2, 'sidecar-node2'), `${node2}'s agent programmed ${NS}/sidecar-node2 (its log: ${log2.slice(-2000)})`);
    for (const pod of ['sidecar', 'plain-server']) {
      assert.deepEqual(linesNamingPod(log2, NS, pod), [], `${node2}'s agent never names ${node1}'s pod ${pod}`);
    }
    for (const pod of ['sidecar-node2', 'client']) {
      assert.deepEqual(linesNamingPod(log1, NS, pod), [], `${node1}'s agent never names ${node2}'s pod ${pod}`);
    }
  });

  it('4 rollout restart (an upgrade): istio-cni stays in the chain in every sample, a running sidecar pod keeps its capture, sidecar pods created throughout start captured (none needs repair)', {
    timeout: 600_000,
  }, async (t) => {
    const node1 = nodeNamed(0).layout.name;
    await sidecarPod('sidecar-during-upgrade', node1, probeLoop(NOWHERE, 80));
    await waitPod('sidecar-during-upgrade', isReady, 'Ready');
    await waitFor(
      'sidecar-during-upgrade/outbound: a first tick',
      async () => ((await ticks('sidecar-during-upgrade', 'outbound')).length > 0 ? true : undefined),
      60_000,
    );
    const oldPods = new Set((await agentPods()).map((p) => p.metadata.name));

    // Pods keep arriving on node 1 while its agent pod terminates and its successor starts: from just
    // before the restart until two more after every agent pod is replaced.
    const churn: string[] = [];
    let rolledOut = false;
    const creating = (async () => {
      for (let extra = 0; extra < 2 && churn.length < CHURN_MAX; ) {
        const name = `sidecar-churn-${churn.length}`;
        await sidecarPod(name, node1, probeOnce(NOWHERE, 80), { validation: true });
        churn.push(name);
        await sleep(CHURN_INTERVAL_MS);
        if (rolledOut) extra++;
      }
    })();
    const restartedAt = Date.now();
    // The plugin in node 1's chain (its conflist entry and binary), sampled every 100 ms.
    const node1Chain = watchGaps(() => {
      try {
        return conflistTypes(nodeNamed(0)).includes('istio-cni') && existsSync(join(nodeNamed(0).layout.dir, 'cni/bin/istio-cni'));
      } catch {
        return false; // unreadable: the runtime could not chain it either
      }
    }, 100);
    try {
      await restartDaemonSet(cluster.controlPlane);
      await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
      await waitAgentsReplaced(oldPods);
    } finally {
      rolledOut = true;
      await creating;
    }
    const rolloutMs = Date.now() - restartedAt;
    const churnEnded = Date.now();
    const chainGaps = node1Chain.stop();
    const chainGapMs = Math.max(0, ...chainGaps.map((g) => g.to - g.from));
    const chainSamples = node1Chain.samples();
    for (const node of cluster.nodes) {
      assert.deepEqual(conflistTypes(node), ['bridge', 'portmap', 'istio-cni'], `${node.layout.name}: still chained after the restart`);
      assert.ok(existsSync(join(node.layout.dir, 'cni/bin/istio-cni')), `${node.layout.name}: the plugin is still installed`);
    }

    const seen = (await ticks('sidecar-during-upgrade', 'outbound')).length;
    const all = await waitFor(
      'sidecar-during-upgrade/outbound: 3 ticks after the restart',
      async () => {
        const ts = await ticks('sidecar-during-upgrade', 'outbound');
        return ts.length >= seen + 3 ? ts : undefined;
      },
      60_000,
      () => describeNamespace(cluster.controlPlane, NS),
    );
    assert.deepEqual(
      all.filter((a) => a !== 'proxy-15001'),
      [],
      'every outbound connection, before, during and after the restart, was captured',
    );

    // Every pod created during the restart starts with its capture: the terminating agent keeps the
    // plugin chained (docs/architecture.md "Upgrades"), so no sandbox comes up without it.
    const churned: Pod[] = [];
    for (const name of churn) churned.push(await waitPod(name, isReady, 'Ready (created during the restart)', 240_000));
    const events = await api().must<{ items: SandboxFailureEvent[] }>(
      'GET',
      `/api/v1/namespaces/${NS}/events?fieldSelector=${encodeURIComponent('reason=FailedCreatePodSandBox')}`,
    );
    const failed = summarizeUpgradeFailures(churned, events.items, restartedAt, churnEnded);
    const list = (names: string[]) => (names.length === 0 ? '' : ` (${names.join(', ')})`);
    t.diagnostic(
      `${churn.length} sidecar pods created on ${node1} every ${CHURN_INTERVAL_MS / 1000} s during a ${(rolloutMs / 1000).toFixed(0)} s rollout: ` +
        `${failed.sandboxFailures} failed sandbox creation(s)${list(failed.sandboxFailed)}, ` +
        `${failed.uncaptured.length} sandbox(es) up without capture, repaired${list(failed.uncaptured)}; ` +
        `longest window of failed creations ${(failed.longestWindowMs / 1000).toFixed(0)} s; ` +
        `${node1}'s chain sampled ${chainSamples.taken} times every 100 ms, istio-cni missing from ${chainSamples.missing} ` +
        `(${chainGaps.length} gap(s), longest ${(chainGapMs / 1000).toFixed(1)} s)`,
    );
    assert.ok(chainSamples.taken > 0, 'the chain was sampled');
    assert.deepEqual(
      { missing: chainSamples.missing, gaps: chainGaps },
      { missing: 0, gaps: [] },
      `istio-cni in ${node1}'s chain in every one of ${chainSamples.taken} samples throughout the rollout`,
    );
    for (const [i, name] of churn.entries()) {
      const said = await answer(name, 'outbound');
      if (said === 'proxy-15001') continue;
      const sandbox = await sandboxOf(nodeNamed(0), NS, name, churned[i]?.metadata.uid ?? '', churned[i]?.status?.podIP ?? '');
      assert.fail(
        `${name} (created during the restart) was not captured: it got ${said}; its netns rules:\n${await podRules(sandbox.netnsPath)}`,
      );
    }
    assert.equal(
      failed.sandboxFailures,
      0,
      `no sandbox creation fails during an upgrade\n${await describeNamespace(cluster.controlPlane, NS)}`,
    );
    assert.deepEqual(failed.uncaptured, [], 'no pod created during the rollout came up uncaptured and needed repair');
    for (const name of churn) await api().must('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`);

    await sidecarPod('sidecar-after-upgrade', node1, probe(NOWHERE, 80));
    assert.equal(await answer('sidecar-after-upgrade', 'outbound'), 'proxy-15001');
  });

  it('5 daemon killed: a sidecar pod still gets its capture (degraded mode or the restarted agent); kubelet restarts the daemon', async (t) => {
    const node = nodeNamed(0);
    const before = await agentPodOn(node.layout.name);
    const restarts = before.status?.containerStatuses?.find((c) => c.name === 'install-cni')?.restartCount ?? 0;
    const id = (await node.crictl(['ps', '--name', 'install-cni', '-q'])).trim();
    assert.match(id, /^[0-9a-f]{64}$/, `one running install-cni container on ${node.layout.name}`);
    // No grace period: SIGKILL, so no shutdown cleanup runs; the plugin finds a socket nobody answers.
    await node.crictl(['stop', '--timeout', '0', id]);
    await sidecarPod('sidecar-agent-killed', node.layout.name, probe(NOWHERE, 80));
    assert.equal(await answer('sidecar-agent-killed', 'outbound'), 'proxy-15001');

    await waitFor(
      `${DAEMONSET} on ${node.layout.name} restarted by kubelet and Ready`,
      async () => {
        const pod = (await agentPods()).find((p) => p.metadata.name === before.metadata.name);
        const now = pod?.status?.containerStatuses?.find((c) => c.name === 'install-cni')?.restartCount ?? 0;
        return pod !== undefined && now > restarts && isReady(pod) ? true : undefined;
      },
      120_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
    const byAgent = [await agentLog(before.metadata.name, true), await agentLog(before.metadata.name, false)].some(
      (log) => log.includes('sidecar-agent-killed') && log.includes('sidecar capture programmed'),
    );
    t.diagnostic(`the capture was programmed by ${byAgent ? 'the restarted agent' : 'the plugin alone (degraded mode)'}`);
  });

  it('6 helm uninstall: the plugin and its conflist entry go; a new sidecar pod starts without capture', async () => {
    await helm(['uninstall', RELEASE_NAME, '--namespace', RELEASE_NAMESPACE, '--wait', '--timeout', '90s']);
    await waitFor(
      `no ${DAEMONSET} pods left after helm uninstall`,
      async () => ((await agentPods()).length === 0 ? true : undefined),
      90_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
    for (const node of cluster.nodes) {
      assert.deepEqual(conflistTypes(node), ['bridge', 'portmap'], `${node.layout.name}: istio-cni removed from the primary conflist`);
      assert.equal(
        existsSync(join(node.layout.dir, 'cni/bin/istio-cni')),
        false,
        `${node.layout.name}: istio-cni removed from the CNI bin dir`,
      );
    }
    const node1 = nodeNamed(0).layout.name;
    await sidecarPod('sidecar-after-uninstall', node1, probeOnce(NOWHERE, 80));
    await waitPod('sidecar-after-uninstall', isReady, 'Ready');
    assert.equal(await answer('sidecar-after-uninstall', 'outbound'), 'none');
  });

  it('7 reinstall with taint.enabled: the readiness taint is lifted from every node; a sidecar pod whose validation failed before the plugin was installed is repaired in place', {
    timeout: 420_000,
  }, async () => {
    const node1 = nodeNamed(0).layout.name;
    await sidecarPod('sidecar-broken', node1, probe(NOWHERE, 80), { validation: true });
    const broken = (pod: Pod) =>
      pod.status?.initContainerStatuses?.some((c) => (c.state?.terminated?.exitCode ?? c.lastState?.terminated?.exitCode) === 126) === true;
    await waitPod('sidecar-broken', broken, 'failing its validation with exit 126 (no plugin installed)', 60_000);

    // As `kubelet --register-with-taints=cni.istio.io/not-ready=:NoSchedule` registers a node (these registered earlier).
    const taintsBefore = new Map<string, Taint[]>();
    for (const node of cluster.nodes) {
      const taints = await nodeTaints(node.layout.name);
      taintsBefore.set(node.layout.name, taints);
      await api().must(
        'PATCH',
        `/api/v1/nodes/${node.layout.name}`,
        { spec: { taints: [...taints, { key: READINESS_TAINT, effect: 'NoSchedule' }] } },
        { contentType: 'application/merge-patch+json' },
      );
    }
    await helmInstall(IMAGE, ['taint.enabled=true']);
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
    for (const node of cluster.nodes) {
      const left = await waitFor(
        `${node.layout.name}: the readiness taint lifted by its agent`,
        async () => {
          const taints = await nodeTaints(node.layout.name);
          return taints.some((tt) => tt.key === READINESS_TAINT) ? undefined : taints;
        },
        60_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
      assert.deepEqual(left, taintsBefore.get(node.layout.name), `${node.layout.name}: only the readiness taint went`);
    }

    // The init container retries with kubelet's back-off (10 s, 20 s, 40 s, ...).
    await waitPod('sidecar-broken', isReady, 'Ready after the repair controller programmed its capture', 180_000);
    assert.equal(await answer('sidecar-broken', 'outbound'), 'proxy-15001');
  });

  it('3 ambient (helm upgrade to profile=ambient): tainted nodes take no pod until their ztunnel connects; a pod in an ambient namespace is handed to its node ztunnel with its netns and redirected in-pod; un-enrolled and deleted, ztunnel gets a Del', {
    timeout: 420_000,
  }, async () => {
    const node1 = nodeNamed(0);
    const oldPods = new Set((await agentPods()).map((p) => p.metadata.name));
    // The default variant: the agent runs in a pod netns and switches to the node's through
    // /host/proc/1/ns/net (ALLOW_SWITCH_TO_HOST_NS), PID 1 of the node's PID namespace being its holder.
    // Both nodes come up as new nodes do with the readiness taint on (scenario 7): registered tainted.
    const hasReadinessTaint = async (nodeName: string) => (await nodeTaints(nodeName)).some((tt) => tt.key === READINESS_TAINT);
    for (const node of cluster.nodes) {
      const taints = await nodeTaints(node.layout.name);
      await api().must(
        'PATCH',
        `/api/v1/nodes/${node.layout.name}`,
        { spec: { taints: [...taints, { key: READINESS_TAINT, effect: 'NoSchedule' }] } },
        { contentType: 'application/merge-patch+json' },
      );
    }
    await helm(['upgrade', RELEASE_NAME, CHART_DIR, '--namespace', RELEASE_NAMESPACE, '--reuse-values', '--set', 'profile=ambient']);
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
    await waitAgentsReplaced(oldPods);

    // Every agent is ready, no ztunnel runs yet: the taint stays, and the scheduler places no ambient pod.
    await createNamespace(AMBIENT_NS, { [DATAPLANE_MODE]: 'ambient' });
    await createPod('ambient-scheduled', '', [container('app', 'sleep 86400')], { namespace: AMBIENT_NS });
    await waitPod(
      'ambient-scheduled',
      (p) => p.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.status === 'False') === true,
      'found unschedulable by the scheduler',
      60_000,
      AMBIENT_NS,
    );
    for (const node of cluster.nodes)
      assert.ok(await hasReadinessTaint(node.layout.name), `${node.layout.name}: tainted while no ztunnel runs`);

    // The fake ztunnel of each node runs on the host and connects to the agent's socket in the node's
    // dir; node 1's first: its taint goes, node 2's stays, and the waiting pod lands on node 1.
    for (const node of cluster.nodes) {
      const path = join(nodePrivateDir(node.layout, '/run/ztunnel'), 'ztunnel.sock');
      const zt = await waitFor(
        `${node.layout.name}: a ZDS connection to ${path}`,
        async () => startFakeZtunnel({ path }).catch(() => undefined),
        60_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
      ztunnels.set(node.layout.name, zt);
      await zt.waitFor(() => zt.snapshots[0] === 1, `${node.layout.name}: the snapshot of the first connection`, 30_000);
      await waitFor(
        `${node.layout.name}: the readiness taint lifted once its ztunnel connected`,
        async () => ((await hasReadinessTaint(node.layout.name)) ? undefined : true),
        60_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
      if (node === node1) {
        assert.ok(await hasReadinessTaint(nodeNamed(1).layout.name), 'node 2 keeps its taint: its ztunnel has not connected');
        const placed = await waitPod('ambient-scheduled', isReady, 'scheduled and Ready', 120_000, AMBIENT_NS);
        assert.equal(placed.spec.nodeName, node1.layout.name, 'the only node whose ztunnel runs');
        await api().must('DELETE', `/api/v1/namespaces/${AMBIENT_NS}/pods/ambient-scheduled`);
      }
    }
    const zt1 = ztunnels.get(node1.layout.name);
    const zt2 = ztunnels.get(nodeNamed(1).layout.name);
    assert.ok(zt1 !== undefined && zt2 !== undefined);
    const name = 'ambient-app';
    await createPod(name, node1.layout.name, [container('app', 'sleep 86400')], { namespace: AMBIENT_NS });
    const pod = await waitPod(name, isReady, 'Ready', 120_000, AMBIENT_NS);
    const uid = pod.metadata.uid;
    const started = await sandboxOf(node1, AMBIENT_NS, name, uid, pod.status?.podIP ?? '');
    const netnsInode = statSync(started.netnsPath).ino;

    const add = zt1.adds.find((a) => a.uid === uid && !a.inSnapshot);
    assert.ok(add, `${node1.layout.name}'s ztunnel got an Add for the pod: ${zt1.log.join(', ')}`);
    assert.equal(add.inode, netnsInode, "the fd ztunnel received is the pod's netns");
    assert.equal(add.workload?.namespace, AMBIENT_NS);
    assert.equal(add.workload?.name, name);
    assert.deepEqual([...zt1.fdProblems, ...zt2.fdProblems], []);
    assert.equal(
      zt2.adds.some((a) => a.uid === uid),
      false,
      "the other node's ztunnel never got the pod",
    );
    assert.equal(pod.metadata.annotations?.[REDIRECTION], 'enabled', 'the redirection annotation');
    // Real traffic from inside the pod's netns: outbound to a port nothing serves reaches ztunnel's
    // 15001; a connection from outside the node (this machine) reaches 15006.
    assert.deepEqual(await probeTraffic(started), { outbound: 'port 15001', inbound: 'port 15006' });

    // A hostUsers: false pod (its netns inside the user namespace kubelet gives it) is enrolled the same way.
    await createPod('ambient-userns', node1.layout.name, [container('app', 'sleep 86400')], { namespace: AMBIENT_NS, hostUsers: false });
    const userns = await waitPod('ambient-userns', isReady, 'Ready', 120_000, AMBIENT_NS);
    assert.equal(userns.spec.hostUsers, false, 'the API server kept the field (UserNamespacesSupport on)');
    const usernsSandbox = await sandboxOf(node1, AMBIENT_NS, 'ambient-userns', userns.metadata.uid, userns.status?.podIP ?? '');
    const usernsAdd = zt1.adds.find((a) => a.uid === userns.metadata.uid && !a.inSnapshot);
    assert.equal(usernsAdd?.inode, statSync(usernsSandbox.netnsPath).ino, "node 1's ztunnel got the hostUsers: false pod's netns");
    assert.equal(userns.metadata.annotations?.[REDIRECTION], 'enabled');
    assert.deepEqual(await probeTraffic(usernsSandbox), { outbound: 'port 15001', inbound: 'port 15006' });
    await api().must('DELETE', `/api/v1/namespaces/${AMBIENT_NS}/pods/ambient-userns`);

    const relabel = (mode: string) =>
      api().must(
        'PATCH',
        `/api/v1/namespaces/${AMBIENT_NS}`,
        { metadata: { labels: { [DATAPLANE_MODE]: mode } } },
        { contentType: 'application/merge-patch+json' },
      );
    const annotation = async () => (await getPod(name, AMBIENT_NS)).metadata.annotations?.[REDIRECTION];
    const dels = () => zt1.dels.filter((d) => d === uid).length;
    await relabel('none');
    await zt1.waitFor(() => dels() === 1, 'the Del of the un-enrolled pod', 60_000);
    await waitPod(
      name,
      (p) => p.metadata.annotations?.[REDIRECTION] === undefined,
      'losing its redirection annotation',
      60_000,
      AMBIENT_NS,
    );
    assert.deepEqual(await probeTraffic(started), { outbound: 'ECONNREFUSED', inbound: 'ECONNREFUSED' }, 'traffic no longer captured');

    // Enrolled again while it runs: the agent finds its netns in the node's /proc by cgroup pod UID.
    const addsBefore = zt1.adds.length;
    await relabel('ambient');
    await zt1.waitFor(() => zt1.adds.slice(addsBefore).some((a) => a.uid === uid), 'the Add of the re-enrolled pod', 60_000);
    assert.equal(zt1.adds.slice(addsBefore).find((a) => a.uid === uid)?.inode, netnsInode, 'found through /proc: the same netns');
    await waitFor(
      'the redirection annotation back',
      async () => ((await annotation()) === 'enabled' ? true : undefined),
      60_000,
      () => describeNamespace(cluster.controlPlane, AMBIENT_NS),
    );
    assert.equal((await probeTraffic(started)).outbound, 'port 15001');

    await api().must('DELETE', `/api/v1/namespaces/${AMBIENT_NS}/pods/${name}`);
    await zt1.waitFor(() => dels() === 2, 'the Del of the deleted pod', 60_000);
    assert.deepEqual([...zt1.fdProblems, ...zt2.fdProblems], []);
  });
});

/**
 * The pod's sandbox as the node's containerd runs it; its netns reached through the sandbox process,
 * whose pid `crictl inspectp` reports in the node's PID namespace.
 */
async function sandboxOf(node: RunningNode, namespace: string, name: string, uid: string, ip: string): Promise<StartedPod> {
  const sandboxId = (await node.crictl(['pods', '--namespace', namespace, '--name', `^${name}$`, '--state', 'ready', '-q'])).trim();
  assert.match(sandboxId, /^[0-9a-f]{64}$/, `one ready sandbox of ${namespace}/${name} on ${node.layout.name}`);
  const inspected = JSON.parse(await node.crictl(['inspectp', sandboxId])) as { info?: { pid?: number } };
  const pid = inspected.info?.pid;
  assert.ok(pid !== undefined && pid > 0, `the sandbox process of ${namespace}/${name}`);
  return { namespace, name, uid, sandboxId, ip, netnsPath: `${nodeProcPath(node.holder.pid, pid)}/ns/net` };
}
