// The install, sidecar, upgrade, daemon-killed, uninstall and repair scenarios on the cluster `make up` starts (two nodes, the node image from
// IMAGE_ARCHIVE, the chart's default values), driven through the Kubernetes API: pods are created in the
// API and run by kubelet; what they saw comes back through their logs.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubeClient } from '../support/kubeClient.ts';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import {
  bringUp,
  DAEMONSET,
  describeNamespace,
  helm,
  helmInstall,
  waitDaemonSetReady,
  WORKLOAD_IMAGE,
  type LocalCluster,
} from './localCluster.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';

const NODES = 2;
const VERSION = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
/** `make e2e` passes mk/image.mk's IMAGE; its default is the same name. */
const IMAGE = process.env.IMAGE ?? `localhost/istio-cni/install-cni:${VERSION}`;
const IMAGE_ARCHIVE = resolve(REPO_ROOT, process.env.IMAGE_ARCHIVE ?? 'dist/image.oci.tar');
const NS = 'e2e-cluster';
/** An address nothing answers on: only a capture rule can make a connection to it succeed. */
const NOWHERE = '192.0.2.123';

type ContainerState = { terminated?: { exitCode?: number } };

interface Pod {
  metadata: { name: string; annotations?: Record<string, string> };
  spec: { nodeName?: string };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { name: string; restartCount: number; containerID?: string }[];
    initContainerStatuses?: { name: string; state?: ContainerState; lastState?: ContainerState }[];
  };
}

const container = (name: string, script: string, user?: number) => ({
  name,
  image: WORKLOAD_IMAGE,
  imagePullPolicy: 'Never',
  command: ['sh', '-c', script],
  ...(user === undefined ? {} : { securityContext: { runAsUser: user, runAsGroup: user } }),
});

/** Answers every connection on port with its name (busybox nc: `-ll` keeps listening). */
const serve = (port: number, answer: string) => `nc -ll -p ${port} -e echo ${answer}`;
/** Connects until something answers, prints `answer:<what it said>`, then idles. */
const probe = (host: string, port: number) =>
  `until out=$(nc -w 2 ${host} ${port} </dev/null) && [ -n "$out" ]; do sleep 1; done; echo "answer:$out"; sleep 86400`;
/** Connects a few times, prints `answer:<what it said>` or `answer:none`, then idles. */
const probeOnce = (host: string, port: number) =>
  `out=; for i in 1 2 3; do out=$(nc -w 2 ${host} ${port} </dev/null) && [ -n "$out" ] && break; sleep 1; done; echo "answer:\${out:-none}"; sleep 86400`;
/** Connects every second for ever, printing `tick:<n>:<what it said or none>`. */
const probeLoop = (host: string, port: number) =>
  `i=0; while true; do i=$((i+1)); out=$(nc -w 2 ${host} ${port} </dev/null); echo "tick:$i:\${out:-none}"; sleep 1; done`;
/** Until `check` returns a value or timeoutMs passes; the error names `what`. */
async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  detail?: () => Promise<string>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s${detail ? `\n${await detail()}` : ''}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe('istio-cni on a kubelet cluster', { timeout: 900_000 }, () => {
  let cluster: LocalCluster;
  const api = (): KubeClient => cluster.controlPlane.api;

  const createPod = async (name: string, nodeName: string, containers: unknown[], annotations: Record<string, string> = {}) => {
    await api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS, annotations },
      spec: { nodeName, terminationGracePeriodSeconds: 1, containers },
    });
  };
  const waitPod = async (name: string, ready: (pod: Pod) => boolean, what: string, timeoutMs = 120_000): Promise<Pod> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const pod = await api().must<Pod>('GET', `/api/v1/namespaces/${NS}/pods/${name}`);
      if (ready(pod)) return pod;
      if (Date.now() > deadline) {
        throw new Error(`pod ${NS}/${name} not ${what} within ${timeoutMs / 1000} s\n${await describeNamespace(cluster.controlPlane, NS)}`);
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  const running = (pod: Pod) => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
  /** The `answer:` line a probe container printed. */
  const answer = async (pod: string, containerName: string, timeoutMs = 60_000): Promise<string> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const res = await api().request('GET', `/api/v1/namespaces/${NS}/pods/${pod}/log?container=${containerName}`);
      const line = res.text.split('\n').find((l) => l.startsWith('answer:'));
      if (line !== undefined) return line.slice('answer:'.length);
      if (Date.now() > deadline) {
        throw new Error(
          `${pod}/${containerName} printed no answer line within ${timeoutMs / 1000} s (log ${res.status}: ${res.text.slice(0, 1000)})`,
        );
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  before(async () => {
    cluster = await bringUp({ nodes: NODES, image: IMAGE, imageTar: IMAGE_ARCHIVE });
    await api().must('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    // The controller-manager creates the namespace's default service account, which pods need.
    const deadline = Date.now() + 60_000;
    while ((await api().request('GET', `/api/v1/namespaces/${NS}/serviceaccounts/default`)).status !== 200) {
      if (Date.now() > deadline) throw new Error(`the controller-manager created no default service account in ${NS} within 60 s`);
      await new Promise((r) => setTimeout(r, 500));
    }
  });

  after(async () => {
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('1 install: the DaemonSet runs on every node; its installer copied the plugin into the node CNI bin dir and chained it last', async () => {
    const pods = await api().must<{ items: Pod[] }>('GET', '/api/v1/namespaces/istio-system/pods?labelSelector=k8s-app%3Distio-cni-node');
    assert.deepEqual(pods.items.map((p) => p.spec.nodeName).sort(), cluster.nodes.map((n) => n.layout.name).sort());
    assert.ok(pods.items.every(running), 'every istio-cni-node pod is Ready');
    const plugin = readFileSync(join(REPO_ROOT, 'dist/istio-cni'));
    for (const node of cluster.nodes) {
      const binDir = join(node.layout.dir, 'cni/bin');
      assert.ok(
        readFileSync(join(binDir, 'istio-cni')).equals(plugin),
        `${node.layout.name}: the node's istio-cni is the image's (dist/istio-cni)`,
      );
      const conflist = JSON.parse(readFileSync(join(node.layout.dir, 'cni/net.d/10-bridge.conflist'), 'utf8')) as {
        plugins: { type: string }[];
      };
      assert.deepEqual(
        conflist.plugins.map((p) => p.type),
        ['bridge', 'portmap', 'istio-cni'],
        `${node.layout.name}: chained after the primary plugins`,
      );
    }
  });

  it('2 sidecar pod: outbound reaches 15001, inbound from another node reaches 15006; a plain pod is untouched', async () => {
    const [node1, node2] = cluster.nodes.map((n) => n.layout.name);
    assert.ok(node1 !== undefined && node2 !== undefined);
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
      { 'sidecar.istio.io/status': SIDECAR_STATUS },
    );
    const plain = await waitPod('plain-server', running, 'Ready');
    const sidecar = await waitPod('sidecar', running, 'Ready');
    assert.equal(await answer('sidecar', 'outbound'), 'proxy-15001');

    await createPod('client', node2, [
      container('to-sidecar', probe(sidecar.status?.podIP ?? '', 8080)),
      container('to-plain', probe(plain.status?.podIP ?? '', 8080)),
    ]);
    assert.equal(await answer('client', 'to-sidecar'), 'proxy-15006');
    assert.equal(await answer('client', 'to-plain'), 'plain-8080');
  });

  const agentPods = async (): Promise<Pod[]> =>
    (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)).items;
  const agentLog = async (pod: string, previous: boolean): Promise<string> =>
    (
      await api().request(
        'GET',
        `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${pod}/log?container=install-cni${previous ? '&previous=true' : ''}`,
      )
    ).text;
  const sidecarPod = (name: string, nodeName: string, outbound: string) =>
    createPod(name, nodeName, [container('istio-proxy', serve(15001, 'proxy-15001'), 1337), container('outbound', outbound)], {
      'sidecar.istio.io/status': SIDECAR_STATUS,
    });

  /** What each `tick:` line of a probeLoop container said, in order. */
  const ticks = async (pod: string, containerName: string): Promise<string[]> => {
    const res = await api().request('GET', `/api/v1/namespaces/${NS}/pods/${pod}/log?container=${containerName}`);
    return res.text
      .split('\n')
      .filter((l) => l.startsWith('tick:'))
      .map((l) => l.split(':').slice(2).join(':'));
  };
  const conflistTypes = (node: LocalCluster['nodes'][number]): string[] =>
    (
      JSON.parse(readFileSync(join(node.layout.dir, 'cni/net.d/10-bridge.conflist'), 'utf8')) as { plugins: { type: string }[] }
    ).plugins.map((p) => p.type);

  it('4 rollout restart (an upgrade): the config stays chained, a running sidecar pod never loses its capture, a new one gets it', async () => {
    const [node1] = cluster.nodes.map((n) => n.layout.name);
    assert.ok(node1 !== undefined);
    await sidecarPod('sidecar-during-upgrade', node1, probeLoop(NOWHERE, 80));
    await waitPod('sidecar-during-upgrade', running, 'Ready');
    await waitFor(
      'sidecar-during-upgrade/outbound: a first tick',
      async () => ((await ticks('sidecar-during-upgrade', 'outbound')).length > 0 ? true : undefined),
      60_000,
    );
    const oldPods = new Set((await agentPods()).map((p) => p.metadata.name));

    // What `kubectl rollout restart` does: a new template annotation, so every pod is replaced.
    await api().must(
      'PATCH',
      `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/${DAEMONSET}`,
      { spec: { template: { metadata: { annotations: { 'kubectl.kubernetes.io/restartedAt': new Date().toISOString() } } } } },
      { contentType: 'application/strategic-merge-patch+json' },
    );
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
    await waitFor(
      `every ${DAEMONSET} pod replaced and Ready`,
      async () => {
        const pods = await agentPods();
        return pods.length === cluster.nodes.length && pods.every((p) => !oldPods.has(p.metadata.name) && running(p)) ? true : undefined;
      },
      120_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
    for (const node of cluster.nodes) {
      assert.deepEqual(conflistTypes(node), ['bridge', 'portmap', 'istio-cni'], `${node.layout.name}: still chained after the restart`);
      assert.ok(existsSync(join(node.layout.dir, 'cni/bin/istio-cni')), `${node.layout.name}: the plugin is still installed`);
    }

    const seen = (await ticks('sidecar-during-upgrade', 'outbound')).length;
    const all = await waitFor(
      'sidecar-during-upgrade/outbound: 3 ticks after the restart',
      async () => {
        const t = await ticks('sidecar-during-upgrade', 'outbound');
        return t.length >= seen + 3 ? t : undefined;
      },
      60_000,
    );
    assert.deepEqual(
      all.filter((a) => a !== 'proxy-15001'),
      [],
      'every outbound connection, before, during and after the restart, was captured',
    );
    await sidecarPod('sidecar-after-upgrade', node1, probe(NOWHERE, 80));
    assert.equal(await answer('sidecar-after-upgrade', 'outbound'), 'proxy-15001');
  });

  it('5 daemon killed: a sidecar pod still gets its capture (degraded mode or the restarted agent); kubelet restarts the daemon', async (t) => {
    const node = cluster.nodes[0];
    assert.ok(node !== undefined);
    const before = (await agentPods()).find((p) => p.spec.nodeName === node.layout.name);
    assert.ok(before !== undefined, `an ${DAEMONSET} pod on ${node.layout.name}`);
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
        return pod !== undefined && now > restarts && running(pod) ? true : undefined;
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
    const [node1] = cluster.nodes.map((n) => n.layout.name);
    assert.ok(node1 !== undefined);
    await sidecarPod('sidecar-after-uninstall', node1, probeOnce(NOWHERE, 80));
    await waitPod('sidecar-after-uninstall', running, 'Ready');
    assert.equal(await answer('sidecar-after-uninstall', 'outbound'), 'none');
  });

  it('7 repair: a sidecar pod whose validation failed before the plugin was installed is repaired in place once it is', async () => {
    const [node1] = cluster.nodes.map((n) => n.layout.name);
    assert.ok(node1 !== undefined);
    // What istio-validation checks: a connection to anywhere reaches the pod's own 15001; else exit 126.
    const validation = container(
      'istio-validation',
      `nc -ll -p 15001 -e echo validated & sleep 0.5; out=$(nc -w 2 ${NOWHERE} 80 </dev/null); [ "$out" = validated ] || exit 126`,
    );
    await api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'sidecar-broken', namespace: NS, annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
      spec: {
        nodeName: node1,
        terminationGracePeriodSeconds: 1,
        initContainers: [validation],
        containers: [container('istio-proxy', serve(15001, 'proxy-15001'), 1337), container('outbound', probe(NOWHERE, 80))],
      },
    });
    const broken = (pod: Pod) =>
      pod.status?.initContainerStatuses?.some((c) => (c.state?.terminated?.exitCode ?? c.lastState?.terminated?.exitCode) === 126) === true;
    await waitPod('sidecar-broken', broken, 'failing its validation with exit 126 (no plugin installed)', 60_000);

    await helmInstall(IMAGE);
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
    // The init container retries with kubelet's back-off (10 s, 20 s, 40 s, ...).
    await waitPod('sidecar-broken', running, 'Ready after the repair controller programmed its capture', 180_000);
    assert.equal(await answer('sidecar-broken', 'outbound'), 'proxy-15001');
  });
});
