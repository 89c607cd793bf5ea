// The install and sidecar scenarios on the cluster `make up` starts (two nodes, the node image from
// IMAGE_ARCHIVE, the chart's default values), driven through the Kubernetes API: pods are created in the
// API and run by kubelet; what they saw comes back through their logs.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { KubeClient } from '../support/kubeClient.ts';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { bringUp, describeNamespace, WORKLOAD_IMAGE, type LocalCluster } from './localCluster.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';

const NODES = 2;
const IMAGE = process.env.IMAGE ?? 'localhost/istio-cni/install-cni:0.1.0';
const IMAGE_ARCHIVE = resolve(REPO_ROOT, process.env.IMAGE_ARCHIVE ?? 'dist/image.oci.tar');
const NS = 'e2e-cluster';
/** An address nothing answers on: only a capture rule can make a connection to it succeed. */
const NOWHERE = '192.0.2.123';

interface Pod {
  metadata: { name: string; annotations?: Record<string, string> };
  spec: { nodeName?: string };
  status?: { phase?: string; podIP?: string; conditions?: { type: string; status: string }[] };
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
        throw new Error(`${pod}/${containerName} printed no answer line within ${timeoutMs / 1000} s (log ${res.status}: ${res.text.slice(0, 1000)})`);
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
      assert.ok(readFileSync(join(binDir, 'istio-cni')).equals(plugin), `${node.layout.name}: the node's istio-cni is the image's (dist/istio-cni)`);
      const conflist = JSON.parse(readFileSync(join(node.layout.dir, 'cni/net.d/10-bridge.conflist'), 'utf8')) as { plugins: { type: string }[] };
      assert.deepEqual(conflist.plugins.map((p) => p.type), ['bridge', 'portmap', 'istio-cni'], `${node.layout.name}: chained after the primary plugins`);
    }
  });

  it('2 sidecar pod: outbound reaches 15001, inbound from another node reaches 15006; a plain pod is untouched', async () => {
    const [node1, node2] = cluster.nodes.map((n) => n.layout.name);
    assert.ok(node1 !== undefined && node2 !== undefined);
    await createPod('plain-server', node1, [container('app', serve(8080, 'plain-8080'))]);
    await createPod('sidecar', node1, [
      container('app', serve(8080, 'app-8080')),
      // The proxy's uid is exempt from capture; it names the port a captured connection arrived on.
      container('istio-proxy', `${serve(15001, 'proxy-15001')} & ${serve(15006, 'proxy-15006')} & wait`, 1337),
      container('outbound', probe(NOWHERE, 80)),
    ], { 'sidecar.istio.io/status': SIDECAR_STATUS });
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
});
