// Ambient enrolment and the ambient half of the degraded-mode scenario on a rig of their own: the chart
// rendered with `profile=ambient` and applied to a real kube-apiserver, dist/install-cni run as
// that DaemonSet's container (ZTUNNEL_UDS_ADDRESS in the scratch dir, the host's own /proc), a
// fake ztunnel speaking ZDS over SOCK_SEQPACKET,
// and containerd running pods through the chain. Run in the order written; each scenario leaves
// the daemon running. The last one uninstalls (the DaemonSet deleted first, so SIGTERM is not an
// upgrade and the host rules and probe sets go too).
import assert from 'node:assert/strict';
import { closeSync, existsSync, readFileSync, statSync } from 'node:fs';
import { openNetnsOwnerUserns } from '@istio-cni/dataplane';
import { after, before, describe, it } from 'node:test';
import { startFakeZtunnel, type FakeAdd, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { applyObjects, findObject, parseManifest, RELEASE_NAMESPACE, renderChart, type KubeObject } from './support/chart.ts';
import { AGENT_POD_NAME, createIstioCniNode, type IstioCniNode } from './support/istioCniNode.ts';
import { waitFor } from './support/managedProcess.ts';
import {
  createPodObject,
  podAnnotations,
  podRules,
  probeTraffic,
  removePod,
  reportPodStatus,
  runPod,
  type StartedPod,
} from './support/pods.ts';
import { startRig, type Rig } from './support/rig.ts';
import { CommandError, runCommand } from './support/runCommand.ts';

const NODE_NAME = 'e2e-node';
const AMBIENT_NS = 'e2e-ambient';
const PLAIN_NS = 'e2e-plain';
const DATAPLANE_MODE = 'istio.io/dataplane-mode';
const REDIRECTION = 'ambient.istio.io/redirection';
const SCENARIO = { timeout: 180_000 };
const READINESS_TAINT = 'cni.istio.io/not-ready';
const OTHER_TAINT = { key: 'example.com/maintenance', value: 'true', effect: 'NoSchedule' };

interface Conflist {
  plugins: { type: string; [key: string]: unknown }[];
}

/** In-pod ambient redirection (upstream's chains): outbound to ztunnel's 15001, inbound to 15006. */
function hasAmbientRedirection(rules: string): boolean {
  return /ISTIO_OUTPUT.*--to-ports 15001/.test(rules) && /ISTIO_PRERT.*--to-ports 15006/.test(rules);
}

describe('istio-cni ambient mode on a real control plane and container runtime', { timeout: 900_000 }, () => {
  let rig: Rig;
  let node: IstioCniNode;
  let objects: KubeObject[];
  let ztunnel: FakeZtunnel | undefined;
  let registeredTaints: Record<string, string>[] = [];
  const pods: StartedPod[] = [];

  const api = () => rig.cluster.api;
  /**
   * The host nat table, both iptables backends. The legacy one is read only if it exists: naming a
   * legacy table loads iptable_nat and creates the table in the host netns, for good.
   */
  const hostNatRules = async () => {
    const names = '/proc/net/ip_tables_names';
    const legacyNat = existsSync(names) && readFileSync(names, 'utf8').split('\n').includes('nat');
    const legacy = legacyNat ? (await runCommand(['iptables-legacy-save', '-t', 'nat'])).stdout : '';
    return (await runCommand(['iptables-nft-save', '-t', 'nat'])).stdout + legacy;
  };
  const pluginTypes = () => (JSON.parse(readFileSync(rig.network.conflistPath, 'utf8')) as Conflist).plugins.map((p) => p.type);
  const labelNamespace = (mode: string) =>
    api().must(
      'PATCH',
      `/api/v1/namespaces/${AMBIENT_NS}`,
      { metadata: { labels: { [DATAPLANE_MODE]: mode } } },
      {
        contentType: 'application/merge-patch+json',
      },
    );
  const redirection = async (pod: { namespace: string; name: string }) =>
    (await podAnnotations(rig.cluster, pod.namespace, pod.name))[REDIRECTION];
  /** RunPodSandbox as kubelet would, expecting containerd to fail it; returns crictl's error output. */
  const runPodExpectingFailure = async (name: string, uid: string, attempt: number): Promise<string> => {
    try {
      const pod = await runPod(rig.containerd, AMBIENT_NS, name, uid, attempt);
      pods.push(pod);
    } catch (error) {
      if (error instanceof CommandError) return error.stderr + error.stdout;
      throw error;
    }
    assert.fail(`RunPodSandbox of ${AMBIENT_NS}/${name} succeeded; it should have failed`);
  };
  const runAmbientPod = async (name: string, uid: string, attempt = 0): Promise<StartedPod> => {
    const pod = await runPod(rig.containerd, AMBIENT_NS, name, uid, attempt);
    pods.push(pod);
    // What kubelet reports once the sandbox runs.
    await reportPodStatus(rig.cluster, pod);
    return pod;
  };
  const nodeTaints = async () =>
    (await api().must<{ spec: { taints?: { key: string }[] } }>('GET', `/api/v1/nodes/${NODE_NAME}`)).spec.taints ?? [];
  const connectZtunnel = async () => {
    ztunnel?.close();
    ztunnel = await startFakeZtunnel({ path: node.ztunnelSocket });
    await ztunnel.waitFor(() => ztunnel?.snapshots[0] === 1, 'the snapshot of the first connection');
    return ztunnel;
  };

  before(async () => {
    rig = await startRig();
    // The daemon runs in this machine's netns, i.e. the chart's host-network variant, which also
    // leaves ALLOW_SWITCH_TO_HOST_NS unset. (With it set, host rules go into /proc/1/ns/net, which
    // this sandbox's init keeps unreadable even for root: the agent then fails to start.)
    // The readiness taint too: the node registers tainted and the agent lifts it with the chart's RBAC.
    objects = parseManifest(
      await renderChart({ set: ['profile=ambient', 'ambient.shareHostNetworkNamespace=true', 'taint.enabled=true'] }),
    );
    await rig.cluster.ensureNamespace(RELEASE_NAMESPACE);
    await rig.cluster.ensureNamespace(AMBIENT_NS, { [DATAPLANE_MODE]: 'ambient' });
    await rig.cluster.ensureNamespace(PLAIN_NS);
    await applyObjects(api(), objects);
    // As `kubelet --register-with-taints=cni.istio.io/not-ready=:NoSchedule` registers it (plus a taint of someone else's).
    registeredTaints = (
      await api().must<{ spec: { taints: Record<string, string>[] } }>('POST', '/api/v1/nodes', {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: NODE_NAME, labels: { 'kubernetes.io/os': 'linux' } },
        spec: { taints: [{ key: READINESS_TAINT, effect: 'NoSchedule' }, OTHER_TAINT] },
      })
    ).spec.taints;
    // The API server's TaintNodesByCondition admission adds node.kubernetes.io/not-ready as well.
    assert.ok(registeredTaints.some((t) => t.key === READINESS_TAINT));
    const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
      spec: { template: { metadata: Record<string, unknown>; spec: Record<string, unknown> } };
    };
    const agentPod = await api().must<{ metadata: { uid: string } }>('POST', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { ...ds.spec.template.metadata, name: AGENT_POD_NAME },
      spec: { ...ds.spec.template.spec, nodeName: NODE_NAME },
    });
    const token = await rig.cluster.requestServiceAccountToken(RELEASE_NAMESPACE, 'istio-cni', {
      audiences: ['https://kubernetes.default.svc.cluster.local'],
      boundPod: { name: AGENT_POD_NAME, uid: agentPod.metadata.uid },
    });
    node = await createIstioCniNode({ cluster: rig.cluster, containerd: rig.containerd, objects, nodeName: NODE_NAME, token: token.token });
  });

  after(async () => {
    ztunnel?.close();
    for (const pod of pods) await removePod(rig.containerd, pod).catch(() => undefined);
    // Not an upgrade: without the DaemonSet, SIGTERM removes the host rules and probe sets.
    await rig?.cluster.api
      .request('DELETE', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`)
      .catch(() => undefined);
    await node?.dispose();
    if (rig !== undefined) assert.deepEqual(await rig.stop(), [], 'the rig left host state behind');
  });

  it(
    '3. install with profile=ambient: ambient on through the ConfigMap, /readyz 200 before any ztunnel connects, readiness taint kept until one does',
    SCENARIO,
    async () => {
      assert.equal(node.env.AMBIENT_ENABLED, 'true');
      const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
        spec: { template: { spec: { hostNetwork?: boolean } } };
      };
      assert.equal(ds.spec.template.spec.hostNetwork, true, 'the rendering matches how the daemon runs here: in the host netns');
      assert.equal(node.env.ALLOW_SWITCH_TO_HOST_NS, undefined);
      await node.start();
      assert.deepEqual(pluginTypes(), ['bridge', 'portmap', 'istio-cni']);
      const istio: Record<string, unknown> = (JSON.parse(readFileSync(rig.network.conflistPath, 'utf8')) as Conflist).plugins.at(-1) ?? {};
      assert.equal(istio.ambient_enabled, true);
      assert.equal(node.env.NODE_TAINT_ENABLED, 'true');
      await waitFor(
        'the daemon ready, keeping the readiness taint for ztunnel',
        async () => {
          const log = node.daemon === undefined ? '' : readFileSync(node.daemon.logFile, 'utf8');
          return log.includes("daemon ready; node readiness taint kept until this node's ztunnel connects") ? true : undefined;
        },
        { process: node.daemon, timeoutMs: 30_000 },
      );
      assert.ok(
        (await nodeTaints()).some((t) => t.key === READINESS_TAINT),
        'the readiness taint stays while no ztunnel is connected: an ambient pod scheduled here could not start',
      );
    },
  );

  it(
    '3. no ztunnel: an ambient pod sandbox fails with a retryable error and starts once ztunnel connects; it is enrolled',
    SCENARIO,
    async () => {
      const name = 'ambient-1';
      const uid = await createPodObject(rig.cluster, 'plain', AMBIENT_NS, name, NODE_NAME);
      // The plugin answers CNI code 11 (try again later; asserted at tier 1), which crictl does not
      // show: here the proof is the message and that kubelet's retry, the next attempt, succeeds.
      const failure = await runPodExpectingFailure(name, uid, 0);
      assert.match(failure, /istio-cni.{0,20} failed \(add\): ztunnel did not take the pod: no ztunnel connection/);
      assert.equal(await redirection({ namespace: AMBIENT_NS, name }), 'pending', 'rules were in place but ztunnel had not taken the pod');

      const zt = await connectZtunnel();
      const taints = await waitFor(
        'the readiness taint to be lifted once ztunnel connected',
        async () => {
          const current = await nodeTaints();
          return current.some((t) => t.key === READINESS_TAINT) ? undefined : current;
        },
        { process: node.daemon, timeoutMs: 30_000 },
      );
      assert.deepEqual(
        taints,
        registeredTaints.filter((t) => t.key !== READINESS_TAINT),
        'only the readiness taint goes',
      );
      assert.ok(taints.some((t) => t.key === OTHER_TAINT.key));
      const pod = await runAmbientPod(name, uid, 1);
      const add = zt.adds.find((a) => a.uid === uid && !a.inSnapshot);
      assert.ok(add, `ztunnel got an Add for the pod: ${zt.log.join(', ')}`);
      assert.equal(add.inode, statSync(pod.netnsPath).ino, "the fd ztunnel received is the pod's netns");
      assert.deepEqual(zt.fdProblems, []);
      assert.equal(add.workload?.namespace, AMBIENT_NS);
      assert.equal(add.workload?.name, name);
      assert.ok(hasAmbientRedirection(await podRules(pod.netnsPath)), 'in-pod redirection rules');
      assert.equal(await redirection(pod), 'enabled', 'the redirection annotation, through the real API');
      // Real traffic: the app's outbound goes to ztunnel's 15001; a node-originated connection (a
      // kubelet probe) is SNATed by the host rules and passes ztunnel by; another pod's goes to 15006.
      assert.deepEqual(await probeTraffic(pod), { outbound: 'port 15001', inbound: 'ECONNREFUSED' });
      const client = await runPod(
        rig.containerd,
        PLAIN_NS,
        'client-1',
        await createPodObject(rig.cluster, 'plain', PLAIN_NS, 'client-1', NODE_NAME),
      );
      pods.push(client);
      assert.equal((await probeTraffic(pod, { inboundFrom: client.netnsPath })).inbound, 'port 15006');
    },
  );

  it('3. relabelling the namespace un-enrols the pod: Del to ztunnel, rules and annotation removed', SCENARIO, async () => {
    const pod = pods.find((p) => p.name === 'ambient-1');
    assert.ok(pod);
    const zt = ztunnel;
    assert.ok(zt);
    await labelNamespace('none');
    await zt.waitFor(() => zt.dels.includes(pod.uid), 'the Del of the un-enrolled pod', 30_000);
    await waitFor('the redirection annotation to go', async () => ((await redirection(pod)) === undefined ? true : undefined), {
      process: node.daemon,
      timeoutMs: 30_000,
    });
    assert.equal(hasAmbientRedirection(await podRules(pod.netnsPath)), false, 'in-pod rules removed');
    const client = pods.find((p) => p.name === 'client-1');
    assert.ok(client);
    assert.deepEqual(
      await probeTraffic(pod, { inboundFrom: client.netnsPath }),
      { outbound: 'ECONNREFUSED', inbound: 'ECONNREFUSED' },
      'traffic no longer captured',
    );

    await labelNamespace('ambient');
    await waitFor('the running pod to be enrolled again', async () => ((await redirection(pod)) === 'enabled' ? true : undefined), {
      process: node.daemon,
      timeoutMs: 30_000,
    });
    const again = zt.adds.filter((a) => a.uid === pod.uid).at(-1);
    assert.equal(again?.inode, statSync(pod.netnsPath).ino, 'found by the procfs scan: the same netns');
    assert.ok(hasAmbientRedirection(await podRules(pod.netnsPath)));
  });

  it('3. a hostUsers: false pod, its netns owned by its own user namespace, is enrolled as any other', SCENARIO, async () => {
    const zt = ztunnel;
    assert.ok(zt);
    const name = 'ambient-userns';
    const uid = await createPodObject(rig.cluster, 'plain', AMBIENT_NS, name, NODE_NAME, { hostUsers: false });
    const pod = await runPod(rig.containerd, AMBIENT_NS, name, uid, 0, { hostUsers: false });
    pods.push(pod);
    await reportPodStatus(rig.cluster, pod);
    const owner = openNetnsOwnerUserns(pod.netnsPath);
    assert.notEqual(owner, undefined, "containerd created the pod's netns inside the pod's user namespace");
    if (owner !== undefined) closeSync(owner);
    const add = zt.adds.find((a) => a.uid === uid && !a.inSnapshot);
    assert.equal(add?.inode, statSync(pod.netnsPath).ino, "ztunnel got the pod's netns");
    assert.ok(hasAmbientRedirection(await podRules(pod.netnsPath)), 'in-pod redirection rules');
    assert.equal(await redirection(pod), 'enabled');
    const client = pods.find((p) => p.name === 'client-1');
    assert.ok(client);
    assert.deepEqual(await probeTraffic(pod, { inboundFrom: client.netnsPath }), { outbound: 'port 15001', inbound: 'port 15006' });
  });

  it('5. daemon killed: an ambient pod fails with a retryable error and starts once the daemon is back', SCENARIO, async () => {
    await node.kill();
    const zt = ztunnel;
    assert.ok(zt);
    await zt.waitFor(() => !zt.connected, 'the ZDS connection to drop with the daemon');
    const name = 'ambient-degraded';
    const uid = await createPodObject(rig.cluster, 'plain', AMBIENT_NS, name, NODE_NAME);
    const failure = await runPodExpectingFailure(name, uid, 0);
    assert.match(failure, /failed \(add\): ambient pod cannot start while the istio-cni node agent is unreachable/);

    await node.start();
    // ztunnel reconnects; the snapshot carries the pod enrolled before the restart, found in procfs.
    const enrolled = pods.find((p) => p.name === 'ambient-1');
    assert.ok(enrolled);
    await zt.reconnect();
    await zt.waitFor(() => zt.snapshots[zt.session - 1] === 1, 'the snapshot of the new connection');
    const snap = zt.adds.find((a) => a.session === zt.session && a.inSnapshot && a.uid === enrolled.uid);
    assert.equal(snap?.inode, statSync(enrolled.netnsPath).ino, 'the snapshot hands over the enrolled pod with its netns');

    const pod = await runAmbientPod(name, uid, 1);
    const add = zt.adds.find((a) => a.uid === uid);
    assert.equal(add?.inode, statSync(pod.netnsPath).ino);
    assert.equal(await redirection(pod), 'enabled');
    assert.deepEqual(zt.fdProblems, []);
  });

  it(
    '7. SIGTERM while the DaemonSet exists is an upgrade: everything stays, the next daemon takes the enrolled pods over',
    SCENARIO,
    async () => {
      const zt = ztunnel;
      assert.ok(zt);
      const enrolled = pods.filter((p) => p.namespace === AMBIENT_NS);
      assert.equal(await node.terminate(), 0);
      assert.deepEqual(pluginTypes(), ['bridge', 'portmap', 'istio-cni'], 'the plugin stays in the chain');
      assert.ok(existsSync(node.kubeconfigPath), 'the plugin kubeconfig stays');
      assert.match(await hostNatRules(), /ISTIO_POSTRT/, 'host rules stay');
      for (const pod of enrolled) assert.ok(hasAmbientRedirection(await podRules(pod.netnsPath)), `${pod.name} keeps its in-pod rules`);
      await zt.waitFor(() => !zt.connected, 'the ZDS connection to close');

      await node.start();
      await zt.reconnect();
      await zt.waitFor(() => zt.snapshots[zt.session - 1] === 1, 'the snapshot of the new connection');
      for (const pod of enrolled) {
        const snap: FakeAdd | undefined = zt.adds.find((a) => a.session === zt.session && a.inSnapshot && a.uid === pod.uid);
        assert.equal(snap?.inode, statSync(pod.netnsPath).ino, `the snapshot hands ${pod.name} over with its netns`);
      }
      assert.deepEqual(zt.fdProblems, []);
    },
  );

  it('7. uninstall: DaemonSet deleted, SIGTERM removes the plugin and the node-level ambient state', SCENARIO, async () => {
    await api().must('DELETE', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/istio-cni-node`);
    assert.match(await hostNatRules(), /ISTIO_POSTRT/, 'the host probe SNAT rules were in place');
    assert.equal(await node.terminate(), 0);
    assert.deepEqual(pluginTypes(), ['bridge', 'portmap']);
    assert.doesNotMatch(await hostNatRules(), /ISTIO_/, 'host rules removed');
    assert.doesNotMatch((await runCommand(['ipset', 'list', '-n'])).stdout, /istio-inpod-probes/, 'probe sets destroyed');
  });
});
