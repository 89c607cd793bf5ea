// The numbered scenarios on the real rig: the chart's rendering applied to a real kube-apiserver,
// dist/install-cni running as the DaemonSet's container would (scratch host root, a TokenRequest
// token in a projected-volume layout), containerd running pods through the chained plugin.
// The scenarios share one rig and one daemon and run in the order written (1, 2, 11, 9, 8, 4, 5, 6,
// 7, 10): each leaves the daemon running except 7, which uninstalls; 10 starts a pod while the plugin
// is out of the chain and then starts the daemon again. Scenario 3 (ambient) and the ambient half
// of 5 need the chart rendered with `profile=ambient`: they run on a rig of their own in
// `ambient.test.ts`.
import assert from 'node:assert/strict';
import { openNetnsOwnerUserns } from '@istio-cni/dataplane';
import { closeSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { applyObjects, DEFAULT_MANIFEST, findObject, parseManifest, RELEASE_NAMESPACE, type KubeObject } from './support/chart.ts';
import { runCnitool } from './support/cnitool.ts';
import { AGENT_POD_NAME, createIstioCniNode, type IstioCniNode } from './support/istioCniNode.ts';
import { makeKubeClient, type KubeClient } from './support/kubeClient.ts';
import { waitFor } from './support/managedProcess.ts';
import {
  createAndRunPod,
  createPodObject,
  hasSidecarCapture,
  type PodOptions,
  podRules,
  probeTraffic,
  removePod,
  reportPodStatus,
  type StartedPod,
} from './support/pods.ts';
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
  /** Waits until containerd's CRI plugin has loaded exactly the conflist now on disk. */
  const waitContainerdCurrent = async () => {
    const onDisk = JSON.parse(readFileSync(rig.network.conflistPath, 'utf8')) as unknown;
    await waitFor(
      'containerd to load the current conflist',
      async () => {
        const info = JSON.parse(await rig.containerd.crictl(['info'])) as {
          cniconfig?: { Networks?: { Config?: { Name?: string; Source?: string } }[] };
        };
        const source = info.cniconfig?.Networks?.find((n) => n.Config?.Name === rig.network.name)?.Config?.Source;
        return source !== undefined && isDeepStrictEqual(JSON.parse(source), onDisk) ? true : undefined;
      },
      { timeoutMs: 30_000 },
    );
  };
  /** The istio-cni entry of the installed conflist in a CNI 1.1.0 list of its own (GC and STATUS need 1.1.0). */
  const writeIstioOnlyList = (): { confDir: string; name: string; conf: Record<string, unknown> } => {
    const entry = readConflist().plugins.find((p) => p.type === 'istio-cni');
    assert.ok(entry, 'the installed conflist has an istio-cni entry');
    const confDir = join(node.dir, 'istio-only');
    mkdirSync(confDir, { recursive: true });
    const conf = { cniVersion: '1.1.0', name: 'e2e-istio-only', plugins: [entry] };
    writeFileSync(join(confDir, 'e2e-istio-only.conflist'), JSON.stringify(conf));
    return { confDir, name: conf.name, conf };
  };
  const startPod = async (kind: 'sidecar' | 'plain', namespace: string, name: string, options: PodOptions = {}) => {
    const pod = await createAndRunPod(rig.cluster, rig.containerd, kind, namespace, name, NODE_NAME, options);
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
    await api().must('POST', '/api/v1/nodes', {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: NODE_NAME, labels: { 'kubernetes.io/os': 'linux' } },
    });
    // The DaemonSet's pod on this node, as its controller and the scheduler would create it.
    const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
      spec: { template: { metadata: Record<string, unknown>; spec: Record<string, unknown> } };
    };
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
    // Not an upgrade: without the DaemonSet, SIGTERM removes the plugin.
    await rig?.cluster.api
      .request('DELETE', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`)
      .catch(() => undefined);
    await node?.dispose();
    if (rig !== undefined) assert.deepEqual(await rig.stop(), [], 'the rig left host state behind');
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
    assert.equal(kc.token, readFileSync(join(node.serviceAccountDir, 'token'), 'utf8'), 'the kubeconfig carries the TokenRequest token');
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

  it('11. a hostUsers: false pod, its netns owned by its own user namespace, is captured (rules and real traffic)', SCENARIO, async () => {
    const pod = await startPod('sidecar', MESH_NS, 'sidecar-userns', { hostUsers: false });
    const owner = openNetnsOwnerUserns(pod.netnsPath);
    assert.notEqual(owner, undefined, "containerd created the pod's netns inside the pod's user namespace");
    if (owner !== undefined) closeSync(owner);
    assert.ok(hasSidecarCapture(await podRules(pod.netnsPath)), 'ISTIO chains in the pod netns');
    assert.deepEqual(await probeTraffic(pod), { outbound: 'port 15001', inbound: 'port 15006' });
  });

  it('9. cnitool drives the same conflist: ADD/CHECK/DEL, then GC (with a valid-attachments list) and STATUS', SCENARIO, async () => {
    const name = 'cnitool-1';
    await createPodObject(rig.cluster, 'sidecar', MESH_NS, name, NODE_NAME);
    const netnsName = `e2e-cnitool-${process.pid}`;
    const netnsPath = `/var/run/netns/${netnsName}`;
    await runCommand(['ip', 'netns', 'add', netnsName]);
    try {
      const options = {
        confDir: rig.containerd.cniConfDir,
        binDir: rig.containerd.cniBinDir,
        args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${MESH_NS};K8S_POD_NAME=${name}`,
      };
      const add = await runCnitool('add', rig.network.name, netnsPath, options);
      // istio-cni passes the primary's result through unchanged (as upstream).
      const result = JSON.parse(add.stdout) as {
        cniVersion: string;
        interfaces: { name: string }[];
        ips: { address: string; gateway: string }[];
      };
      assert.equal(result.cniVersion, '1.0.0');
      assert.match(result.ips[0]?.address ?? '', /^10\.244\.250\.\d+\/24$/);
      assert.equal(result.ips[0]?.gateway, '10.244.250.1');
      assert.ok(result.interfaces.some((i) => i.name === 'eth0'));
      assert.ok(hasSidecarCapture(await podRules(netnsPath)), 'ADD programmed the sidecar capture');
      const check = await runCnitool('check', rig.network.name, netnsPath, options);
      assert.equal(check.stdout, '');
      await runCnitool('del', rig.network.name, netnsPath, options);
      const links = await runCommand(['ip', '-n', netnsName, '-o', 'link', 'show']);
      assert.equal(links.stdout.includes('eth0'), false, 'DEL removed eth0');
    } finally {
      await runCommand(['ip', 'netns', 'delete', netnsName], { allowFailure: true });
    }

    const only = writeIstioOnlyList();
    const status = await runCnitool('status', only.name, '/dev/null', { confDir: only.confDir, binDir: rig.containerd.cniBinDir });
    assert.equal(status.stdout, '', 'STATUS succeeds silently while the agent is up');
    await runCnitool('gc', only.name, '/dev/null', { confDir: only.confDir, binDir: rig.containerd.cniBinDir });
    // cnitool's GC sends no list; this is the GC netconf libcni sends a plugin when the runtime has one.
    const gcConf = {
      ...(only.conf.plugins as Record<string, unknown>[])[0],
      cniVersion: '1.1.0',
      name: only.name,
      'cni.dev/valid-attachments': [{ containerID: 'e2e-still-running', ifname: 'eth0' }],
    };
    const gc = await runCommand([join(rig.containerd.cniBinDir, 'istio-cni')], {
      input: JSON.stringify(gcConf),
      env: { PATH: process.env.PATH ?? '', CNI_COMMAND: 'GC', CNI_PATH: rig.containerd.cniBinDir },
    });
    assert.equal(gc.stdout, '');
    const bad = await runCommand([join(rig.containerd.cniBinDir, 'istio-cni')], {
      input: JSON.stringify({ ...gcConf, 'cni.dev/valid-attachments': 'not-a-list' }),
      env: { PATH: process.env.PATH ?? '', CNI_COMMAND: 'GC', CNI_PATH: rig.containerd.cniBinDir },
      allowFailure: true,
    });
    assert.notEqual(bad.exitCode, 0, 'a malformed valid-attachments list is refused');
    assert.match(bad.stdout, /valid-attachments/);
  });

  it('8. RBAC: every call the daemon makes is allowed with its token; calls it must not make are denied', SCENARIO, async () => {
    const token = readFileSync(join(node.serviceAccountDir, 'token'), 'utf8');
    const sa = api().withToken(token);
    const selector = `fieldSelector=${encodeURIComponent(`spec.nodeName=${NODE_NAME}`)}`;
    const allowed: [string, string][] = [
      ['GET', `/api/v1/pods?${selector}`],
      ['GET', `/api/v1/pods?${selector}&watch=true&timeoutSeconds=1`],
      ['GET', '/api/v1/namespaces'],
      ['GET', '/api/v1/namespaces?watch=true&timeoutSeconds=1'],
      ['GET', `/api/v1/namespaces/${MESH_NS}/pods/sidecar-1`],
      ['GET', `/api/v1/namespaces/${MESH_NS}`],
      // The upgrade check at shutdown reads its own DaemonSet, and only that one.
      ['GET', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`],
      // Read-only, as upstream's base role: upstream's agent stopping under this role during a switch
      // reads its Node (the chart's clusterrole.yaml); patching it stays denied below.
      ['GET', `/api/v1/nodes/${NODE_NAME}`],
    ];
    for (const [method, path] of allowed) {
      const res = await sa.request(method, path, undefined, { timeoutMs: 10_000 });
      assert.equal(res.status, 200, `${method} ${path} answered ${res.status}: ${res.text.slice(0, 300)}`);
    }
    const other = await api().must<{ metadata: { name: string } }>('POST', `/api/v1/namespaces/${MESH_NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'on-another-node' },
      spec: { nodeName: 'other-node', containers: [{ name: 'app', image: 'localhost/istio-cni-e2e/pause:v1' }] },
    });
    const otherPod = `/api/v1/namespaces/${MESH_NS}/pods/${other.metadata.name}`;
    const merge = { contentType: 'application/merge-patch+json' };
    const denied: [string, string, unknown?, { contentType: string }?][] = [
      ['GET', '/api/v1/secrets'],
      ['GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/secrets`],
      ['GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/configmaps/istio-cni-config`],
      [
        'POST',
        `/api/v1/namespaces/${MESH_NS}/pods`,
        { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' }, spec: { containers: [{ name: 'x', image: 'x' }] } },
      ],
      ['PATCH', otherPod, { metadata: { labels: { hacked: 'true' } } }, merge],
      ['PATCH', `${otherPod}/status`, { metadata: { annotations: { hacked: 'true' } } }, merge],
      ['DELETE', otherPod],
      [
        'POST',
        `${otherPod}/eviction`,
        { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: other.metadata.name, namespace: MESH_NS } },
      ],
      ['DELETE', `/api/v1/nodes/${NODE_NAME}`],
      ['PATCH', `/api/v1/nodes/${NODE_NAME}`, { spec: { taints: [{ key: 'cni.istio.io/not-ready', effect: 'NoSchedule' }] } }, merge],
      ['POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x' } }],
      [
        'POST',
        `/api/v1/namespaces/${RELEASE_NAMESPACE}/serviceaccounts/istio-cni/token`,
        { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: {} },
      ],
      [
        'POST',
        '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: 'x' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
          subjects: [{ kind: 'ServiceAccount', name: 'istio-cni', namespace: RELEASE_NAMESPACE }],
        },
      ],
      ['GET', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets`],
      ['GET', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/another-daemonset`],
      [
        'PATCH',
        `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`,
        { spec: { template: { metadata: { labels: { hacked: 'true' } } } } },
        merge,
      ],
    ];
    for (const [method, path, body, options] of denied) {
      const res = await sa.request(method, path, body, options);
      assert.equal(res.status, 403, `${method} ${path} must be forbidden, answered ${res.status}: ${res.text.slice(0, 200)}`);
    }
    // The repair role's grant (events), checked without creating anything.
    const review = await sa.must<{ status: { allowed: boolean } }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: { resourceAttributes: { verb: 'create', resource: 'events', namespace: MESH_NS } },
    });
    assert.equal(review.status.allowed, true);
  });

  it('4. token rotation through a new TokenRequest and a ..data swap: the kubeconfig follows', SCENARIO, async () => {
    const oldToken = node.readKubeconfig().token;
    const agentPod = await api().must<{ metadata: { uid: string } }>(
      'GET',
      `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${AGENT_POD_NAME}`,
    );
    // What kubelet does for the projected volume: a token bound to the agent's pod.
    const newToken = await requestToken({ apiVersion: 'v1', kind: 'Pod', name: AGENT_POD_NAME, uid: agentPod.metadata.uid });
    assert.notEqual(newToken, oldToken);
    node.writeToken(newToken);
    await waitFor('the kubeconfig to carry the new token', async () => (node.readKubeconfig().token === newToken ? true : undefined), {
      process: node.daemon,
      timeoutMs: 30_000,
    });
    // Revoke the old token: only the rotated kubeconfig can authenticate from here on.
    await api().must('DELETE', `/api/v1/namespaces/${RELEASE_NAMESPACE}/secrets/${BOOTSTRAP_SECRET}`);
    await waitFor(
      'the old token to be rejected',
      async () => ((await whoAmI(api().withToken(oldToken))).status === 401 ? true : undefined),
      {
        timeoutMs: 30_000,
      },
    );
    const review = await whoAmI(kubeconfigClient());
    assert.equal(review.status, 201, review.text);
    assert.equal(review.body.status?.userInfo?.username, SA);
    assert.equal(await node.readyz(), 200);
  });

  it('5. daemon killed: plain pods start, sidecar pods are set up in degraded mode with the rotated token', SCENARIO, async () => {
    await node.kill();
    assert.ok(pluginTypes().includes('istio-cni'), 'no cleanup ran: the plugin stays in the chain');
    assert.equal(await node.readyz(), 0);

    const plain = await startPod('plain', MESH_NS, 'plain-degraded');
    assert.equal(hasSidecarCapture(await podRules(plain.netnsPath)), false);
    const sidecar = await startPod('sidecar', MESH_NS, 'sidecar-degraded');
    assert.ok(hasSidecarCapture(await podRules(sidecar.netnsPath)), 'the plugin programmed the capture itself');
    assert.deepEqual(await probeTraffic(sidecar), { outbound: 'port 15001', inbound: 'port 15006' });
    // Ambient pods fail with a retryable error here and start once the daemon is back: ambient.test.ts.

    const only = writeIstioOnlyList();
    const status = await runCnitool('status', only.name, '/dev/null', {
      confDir: only.confDir,
      binDir: rig.containerd.cniBinDir,
      allowFailure: true,
    });
    // The agent is down: STATUS succeeds (only kubelet can bring the agent back, which it does not
    // for a pod-network pod while the runtime reports the network not ready), with or without the
    // kubeconfig degraded mode needs.
    assert.equal(status.exitCode, 0, `STATUS succeeds with the agent down: ${status.stderr}${status.stdout}`);
    const kubeconfigAside = `${node.kubeconfigPath}.aside`;
    renameSync(node.kubeconfigPath, kubeconfigAside);
    try {
      const without = await runCnitool('status', only.name, '/dev/null', {
        confDir: only.confDir,
        binDir: rig.containerd.cniBinDir,
        allowFailure: true,
      });
      assert.equal(without.exitCode, 0, `STATUS succeeds with the agent down and no kubeconfig: ${without.stderr}${without.stdout}`);
    } finally {
      renameSync(kubeconfigAside, node.kubeconfigPath);
    }

    await node.start();
    const back = await startPod('sidecar', MESH_NS, 'sidecar-agent-back');
    assert.ok(hasSidecarCapture(await podRules(back.netnsPath)));
  });

  it('6. the primary CNI rewrites its conflist: istio-cni is back before the next pod starts', SCENARIO, async () => {
    writeFileSync(rig.network.conflistPath, primaryConflist);
    await waitFor('istio-cni back in the conflist', async () => (pluginTypes().includes('istio-cni') ? true : undefined), {
      process: node.daemon,
      timeoutMs: 30_000,
    });
    assert.deepEqual(pluginTypes(), ['bridge', 'portmap', 'istio-cni']);
    await waitContainerdCurrent();
    const pod = await startPod('sidecar', MESH_NS, 'sidecar-after-rewrite');
    assert.ok(hasSidecarCapture(await podRules(pod.netnsPath)));
    // Readiness drops while the installer re-runs its pass (as upstream) and comes back after it.
    await waitFor('/readyz 200 again', async () => ((await node.readyz()) === 200 ? true : undefined), {
      process: node.daemon,
      timeoutMs: 30_000,
    });
  });

  it(
    '7. SIGTERM: a DaemonSet rollout keeps the plugin chained; after an uninstall, cleanup leaves a working primary-only chain and a new pod still starts',
    SCENARIO,
    async () => {
      const chained = readConflist();
      assert.equal(await node.terminate(), 0, 'install-cni exits 0 on SIGTERM');
      assert.deepEqual(readConflist(), chained, 'the DaemonSet still targets the node (an upgrade): istio-cni stays chained');
      assert.ok(existsSync(join(rig.containerd.cniBinDir, 'istio-cni')), 'the plugin binary stays');
      assert.ok(existsSync(node.kubeconfigPath), 'the plugin kubeconfig stays');
      await node.start();
      // What `helm uninstall` does first; its RBAC and service account go after it.
      await api().must('DELETE', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`);
      assert.equal(await node.terminate(), 0, 'install-cni exits 0 on SIGTERM');
      assert.deepEqual(readConflist(), JSON.parse(primaryConflist), 'the primary conflist is back to what the primary CNI wrote');
      assert.equal(existsSync(join(rig.containerd.cniBinDir, 'istio-cni')), false, 'the plugin binary is removed');
      assert.equal(existsSync(node.kubeconfigPath), false, 'the plugin kubeconfig is removed');
      await waitContainerdCurrent();
      const pod = await startPod('sidecar', MESH_NS, 'sidecar-after-uninstall');
      assert.match(pod.ip, /^10\.244\.250\.\d+$/);
      assert.equal(hasSidecarCapture(await podRules(pod.netnsPath)), false);
    },
  );

  it(
    '10. repair: a sidecar pod started without the plugin, its validation exiting 126, is repaired in place and captured',
    SCENARIO,
    async () => {
      // After 7 the chain is primary-only: containerd starts this pod without istio-cni.
      const pod = await startPod('sidecar', MESH_NS, 'sidecar-broken');
      assert.equal(hasSidecarCapture(await podRules(pod.netnsPath)), false, 'started without capture');
      assert.notEqual((await probeTraffic(pod)).outbound, 'port 15001', 'traffic is not captured yet');
      // What kubelet then reports: istio-validation found no redirection and exited 126, crash-looping.
      await reportPodStatus(rig.cluster, pod, {
        phase: 'Pending',
        initContainer: {
          name: 'istio-validation',
          lastTerminated: { exitCode: 126, message: 'iptables validation failed; workload is not ready for Istio' },
        },
      });
      // The plain sidecar pod of scenario 7 has no failed validation: it must be left alone.
      const healthy = pods.find((p) => p.name === 'sidecar-after-uninstall');
      assert.ok(healthy);
      await reportPodStatus(rig.cluster, healthy);

      await node.start();
      assert.equal(node.env.REPAIR_ENABLED, 'true');
      assert.equal(node.env.REPAIR_REPAIR_PODS, 'true');
      await waitFor(
        'the repair controller to program the broken pod',
        async () => (hasSidecarCapture(await podRules(pod.netnsPath)) ? true : undefined),
        {
          process: node.daemon,
          timeoutMs: 30_000,
        },
      );
      assert.deepEqual(await probeTraffic(pod), { outbound: 'port 15001', inbound: 'port 15006' });
      assert.match(readFileSync(node.daemon?.logFile ?? '', 'utf8'), /pod repaired: traffic capture programmed/);
      // The Warning event the repair role may create, through the real API.
      const events = await api().must<{ items: { reason: string; message: string; involvedObject: { name: string; uid?: string } }[] }>(
        'GET',
        `/api/v1/namespaces/${MESH_NS}/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${pod.name}`)}`,
      );
      assert.ok(
        events.items.some((e) => e.involvedObject.uid === pod.uid && /traffic capture programmed in place/.test(e.message)),
        `a repair event for the pod: ${JSON.stringify(events.items.map((e) => [e.reason, e.message]))}`,
      );
      assert.equal(hasSidecarCapture(await podRules(healthy.netnsPath)), false, 'a pod without a failed validation is not touched');
      // The watch path: that pod's validation fails now, while the daemon runs.
      await reportPodStatus(rig.cluster, healthy, {
        initContainer: { name: 'istio-validation', lastTerminated: { exitCode: 126 } },
      });
      await waitFor(
        'the watch to repair the newly broken pod',
        async () => (hasSidecarCapture(await podRules(healthy.netnsPath)) ? true : undefined),
        {
          process: node.daemon,
          timeoutMs: 30_000,
        },
      );
      assert.deepEqual(await probeTraffic(healthy), { outbound: 'port 15001', inbound: 'port 15006' });
      const alive = await api().must<{ metadata: { uid: string; deletionTimestamp?: string } }>(
        'GET',
        `/api/v1/namespaces/${MESH_NS}/pods/${pod.name}`,
      );
      assert.equal(alive.metadata.uid, pod.uid, 'repaired in place: the pod was not deleted');
      assert.equal(alive.metadata.deletionTimestamp, undefined);
    },
  );
});
