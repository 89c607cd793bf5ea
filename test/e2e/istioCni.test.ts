// Issue 8 scenarios on the real rig: the chart's rendering applied to a real kube-apiserver,
// dist/install-cni running as the DaemonSet's container would (scratch host root, a TokenRequest
// token in a projected-volume layout), containerd running pods through the chained plugin.
// Scenarios 3 (ambient) and 10 (repair) join here once those features land.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { applyObjects, DEFAULT_MANIFEST, findObject, parseManifest, RELEASE_NAMESPACE, type KubeObject } from './support/chart.ts';
import { runCnitool } from './support/cnitool.ts';
import { AGENT_POD_NAME, createIstioCniNode, DIST, type IstioCniNode } from './support/istioCniNode.ts';
import { makeKubeClient, type KubeClient } from './support/kubeClient.ts';
import { waitFor } from './support/managedProcess.ts';
import { createAndRunPod, hasSidecarCapture, podRules, probeTraffic, removePod, type StartedPod } from './support/pods.ts';
import { startRig, type Rig } from './support/rig.ts';
import { runCommand } from './support/runCommand.ts';

const NODE_NAME = 'e2e-node';
const MESH_NS = 'e2e-mesh';
const EXCLUDED_NS = 'kube-system';
const SA = `system:serviceaccount:${RELEASE_NAMESPACE}:istio-cni`;
const BOOTSTRAP_SECRET = 'istio-cni-e2e-bootstrap';
const SCENARIO = { timeout: 180_000 };

interface Conflist {
  cniVersion: string;
  name: string;
  plugins: { type: string; [key: string]: unknown }[];
}

describe('istio-cni on a real control plane and container runtime', { timeout: 1_200_000 }, () => {
  let rig: Rig;
  let node: IstioCniNode;
  let objects: KubeObject[];
  let primaryConflist = '';
  const pods: StartedPod[] = [];

  const api = () => rig.cluster.api;
  const readConflist = (): Conflist => JSON.parse(readFileSync(rig.network.conflistPath, 'utf8')) as Conflist;
  const pluginTypes = () => readConflist().plugins.map((p) => p.type);
  const whoAmI = async (client: KubeClient) =>
    client.request<{ status?: { userInfo?: { username?: string } } }>('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'SelfSubjectReview',
    });
  const kubeconfigClient = () => {
    const kc = node.readKubeconfig();
    return makeKubeClient(kc.server, kc.caPem, kc.token);
  };
  /** The plugin types of the network containerd's CRI plugin has loaded right now. */
  const loadedByContainerd = async (): Promise<string[]> => {
    const info = JSON.parse(await rig.containerd.crictl(['info'])) as {
      cniconfig?: { Networks?: { Config?: { Name?: string; Plugins?: { Network?: { type?: string } }[] } }[] };
    };
    const net = info.cniconfig?.Networks?.find((n) => n.Config?.Name === rig.network.name);
    return (net?.Config?.Plugins ?? []).map((p) => p.Network?.type ?? '');
  };
  const waitLoaded = (want: (types: string[]) => boolean, what: string) =>
    waitFor(`containerd to load ${what}`, async () => (want(await loadedByContainerd()) ? true : undefined), { timeoutMs: 30_000 });
  const startPod = async (kind: 'sidecar' | 'plain', namespace: string, name: string) => {
    const pod = await createAndRunPod(rig.cluster, rig.containerd, kind, namespace, name, NODE_NAME);
    pods.push(pod);
    return pod;
  };
  const requestToken = async (boundObjectRef: Record<string, string>) =>
    (
      await api().must<{ status: { token: string } }>('POST', `/api/v1/namespaces/${RELEASE_NAMESPACE}/serviceaccounts/istio-cni/token`, {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec: { audiences: ['https://kubernetes.default.svc.cluster.local'], expirationSeconds: 3600, boundObjectRef },
      })
    ).status.token;

  before(async () => {
    rig = await startRig();
    objects = parseManifest(readFileSync(DEFAULT_MANIFEST, 'utf8'));
    primaryConflist = readFileSync(rig.network.conflistPath, 'utf8');
    await rig.cluster.ensureNamespace(RELEASE_NAMESPACE);
    await rig.cluster.ensureNamespace(MESH_NS);
    await rig.cluster.ensureNamespace(EXCLUDED_NS);
    // `kubectl apply -f manifests/istio-cni.yaml`: every object, the DaemonSet included (no controller runs it).
    await applyObjects(api(), objects);
    await api().must('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: NODE_NAME, labels: { 'kubernetes.io/os': 'linux' } } });
    // The DaemonSet's pod on this node, as its controller and the scheduler would create it.
    const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as { spec: { template: { metadata: Record<string, unknown>; spec: Record<string, unknown> } } };
    await api().must('POST', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { ...ds.spec.template.metadata, name: AGENT_POD_NAME },
      spec: { ...ds.spec.template.spec, nodeName: NODE_NAME },
    });
    // The first token is bound to a throwaway Secret so scenario 4 can revoke it.
    const secret = await api().must<{ metadata: { uid: string } }>('POST', `/api/v1/namespaces/${RELEASE_NAMESPACE}/secrets`, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: BOOTSTRAP_SECRET },
    });
    const token = await requestToken({ apiVersion: 'v1', kind: 'Secret', name: BOOTSTRAP_SECRET, uid: secret.metadata.uid });
    node = await createIstioCniNode({ cluster: rig.cluster, containerd: rig.containerd, objects, nodeName: NODE_NAME, token });
  });

  after(async () => {
    for (const pod of pods) await removePod(rig.containerd, pod).catch(() => undefined);
    await node?.dispose();
    if (rig !== undefined) {
      const leaks = await rig.stop();
      if (process.env.E2E_DEBUG_LEAKS) console.log(JSON.stringify(leaks, null, 1));
      assert.deepEqual(leaks, [], 'the rig left host state behind');
    }
  });

  it('1. install: the primary conflist gains istio-cni, the kubeconfig authenticates, /readyz turns 200', SCENARIO, async () => {
    assert.equal(await node.readyz(), 0, 'nothing answers before the daemon starts');
    await node.start();
    assert.equal(await node.readyz(), 200);
    assert.deepEqual(pluginTypes(), ['bridge', 'portmap', 'istio-cni']);
    const istio: Record<string, unknown> = readConflist().plugins.at(-1) ?? {};
    assert.equal(istio.cni_agent_run_dir, node.runDir);
    assert.deepEqual(istio.exclude_namespaces, [EXCLUDED_NS]);
    assert.equal(istio.pod_namespace, RELEASE_NAMESPACE);
    assert.ok(existsSync(join(rig.containerd.cniBinDir, 'istio-cni')), 'the plugin is installed into the CNI bin dir');

    const kc = node.readKubeconfig();
    assert.equal(kc.server, rig.cluster.server);
    assert.equal(kc.caPem, rig.cluster.caPem);
    const review = await whoAmI(kubeconfigClient());
    assert.equal(review.status, 201, review.text);
    assert.equal(review.body.status?.userInfo?.username, SA);
    await waitLoaded((t) => t.includes('istio-cni'), 'the chained conflist');
  });

  it('2. a sidecar pod is captured (rules and real traffic); plain and excluded-namespace pods are untouched', SCENARIO, async () => {
    const sidecar = await startPod('sidecar', MESH_NS, 'sidecar-1');
    assert.ok(hasSidecarCapture(await podRules(sidecar.netnsPath)), 'ISTIO chains in the sidecar pod netns');
    assert.deepEqual(await probeTraffic(sidecar), { outbound: 'port 15001', inbound: 'port 15006' });

    const plain = await startPod('plain', MESH_NS, 'plain-1');
    assert.equal(hasSidecarCapture(await podRules(plain.netnsPath)), false);
    const plainTraffic = await probeTraffic(plain);
    assert.equal(plainTraffic.inbound, 'ECONNREFUSED', 'nothing redirects port 8080 of a plain pod');
    assert.notEqual(plainTraffic.outbound, 'port 15001');

    const excluded = await startPod('sidecar', EXCLUDED_NS, 'sidecar-excluded');
    assert.equal(hasSidecarCapture(await podRules(excluded.netnsPath)), false, 'no ISTIO chains in an excluded namespace');
    const log = readFileSync(node.daemon?.logFile ?? '', 'utf8');
    assert.match(log, /sidecar capture programmed/);
  });
});
