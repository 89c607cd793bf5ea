// The Helm chart (manifests/charts/istio-cni) rendered with the rig's helm: the checked-in default
// rendering is current, RBAC follows the enabled features, profiles and user values merge in order.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import {
  applyObjects,
  DEFAULT_MANIFEST,
  findObject,
  parseManifest,
  RELEASE_NAMESPACE,
  renderChart,
  type KubeObject,
} from './support/chart.ts';
import { startCluster } from './support/cluster.ts';
import { CommandError } from './support/runCommand.ts';

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function render(...set: string[]): Promise<KubeObject[]> {
  return parseManifest(await renderChart({ set }));
}

/** Every `group/resource verb` the rendering's ClusterRoles grant (with `:name` when restricted). */
function grants(objects: readonly KubeObject[]): string[] {
  const out = new Set<string>();
  for (const role of objects.filter((o) => o.kind === 'ClusterRole')) {
    for (const rule of role.rules as PolicyRule[]) {
      for (const group of rule.apiGroups) {
        for (const resource of rule.resources) {
          for (const verb of rule.verbs) {
            const names = rule.resourceNames?.length ? `:${rule.resourceNames.join(',')}` : '';
            out.add(`${group || 'core'}/${resource}${names} ${verb}`);
          }
        }
      }
    }
  }
  return [...out].sort();
}

function daemonSetContainer(objects: readonly KubeObject[]): Record<string, unknown> {
  const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
    spec: { template: { spec: { containers: Record<string, unknown>[] } } };
  };
  const container = ds.spec.template.spec.containers.find((c) => c.name === 'install-cni');
  assert.ok(container, 'the DaemonSet runs an install-cni container');
  return container;
}

function hostPaths(objects: readonly KubeObject[]): Record<string, string> {
  const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
    spec: { template: { spec: { volumes: { name: string; hostPath?: { path: string } }[] } } };
  };
  return Object.fromEntries(ds.spec.template.spec.volumes.map((v) => [v.name, v.hostPath?.path ?? '']));
}

function configData(objects: readonly KubeObject[]): Record<string, string> {
  return findObject(objects, 'ConfigMap', 'istio-cni-config').data as Record<string, string>;
}

describe('istio-cni Helm chart', () => {
  test('manifests/istio-cni.yaml is the current default rendering (run `make manifests`)', async () => {
    assert.equal(readFileSync(DEFAULT_MANIFEST, 'utf8'), await renderChart());
  });

  test('the default rendering: ServiceAccount, ConfigMap, base and repair RBAC, DaemonSet', async () => {
    const objects = await render();
    assert.deepEqual(objects.map((o) => `${o.kind}/${o.metadata.name}`).sort(), [
      'ClusterRole/istio-cni',
      'ClusterRole/istio-cni-repair-role',
      'ClusterRoleBinding/istio-cni',
      'ClusterRoleBinding/istio-cni-repair-rolebinding',
      'ConfigMap/istio-cni-config',
      'DaemonSet/istio-cni-node',
      'ServiceAccount/istio-cni',
    ]);
    assert.deepEqual(grants(objects), [
      'apps/daemonsets:istio-cni-node get',
      'core/events create',
      'core/events patch',
      'core/namespaces get',
      'core/namespaces list',
      'core/namespaces watch',
      'core/nodes get',
      'core/nodes list',
      'core/nodes watch',
      'core/pods get',
      'core/pods list',
      'core/pods watch',
    ]);
    for (const binding of objects.filter((o) => o.kind === 'ClusterRoleBinding')) {
      assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'istio-cni', namespace: 'istio-system' }]);
    }
    const container = daemonSetContainer(objects);
    const security = container.securityContext as { privileged: boolean; capabilities: { drop: string[]; add: string[] } };
    assert.equal(security.privileged, false);
    assert.deepEqual(security.capabilities.drop, ['ALL']);
    assert.deepEqual(security.capabilities.add, ['NET_ADMIN', 'NET_RAW', 'SYS_PTRACE', 'SYS_ADMIN', 'DAC_OVERRIDE']);
    assert.deepEqual(container.readinessProbe, { httpGet: { path: '/readyz', port: 8000 } });
    assert.deepEqual(hostPaths(objects), {
      'cni-bin-dir': '/opt/cni/bin',
      'cni-net-dir': '/etc/cni/net.d',
      'cni-socket-dir': '/var/run/istio-cni',
      'cni-host-procfs': '/proc',
      'cni-netns-dir': '/var/run/netns',
    });
    // The agent opens the netns path the plugin hands it for sidecar pods, so without ambient too.
    const mounts = container.volumeMounts as { name: string; mountPath: string; mountPropagation?: string }[];
    assert.deepEqual(
      mounts.filter((m) => m.name === 'cni-netns-dir'),
      [{ name: 'cni-netns-dir', mountPath: '/var/run/netns', mountPropagation: 'HostToContainer' }],
    );
    const env = container.env as { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
    assert.equal(env.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
    assert.equal(env.find((e) => e.name === 'POD_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath, 'metadata.namespace');
    const data = configData(objects);
    assert.equal(data.EXCLUDE_NAMESPACES, 'kube-system');
    assert.equal(data.CHAINED_CNI_PLUGIN, 'true');
    assert.equal(data.ISTIO_OWNED_CNI_CONFIG_FILENAME, undefined);
  });

  test('AppArmor unconfined: unset, the field from Kubernetes 1.30 and the annotation before; set, as upstream', async () => {
    const annotationKey = 'container.apparmor.security.beta.kubernetes.io/install-cni';
    async function appArmor(kubeVersion: string, ...set: string[]): Promise<{ annotation: string | undefined; field: unknown }> {
      const objects = parseManifest(await renderChart({ set, kubeVersion }));
      const ds = findObject(objects, 'DaemonSet', 'istio-cni-node') as unknown as {
        spec: { template: { metadata: { annotations: Record<string, string> } } };
      };
      const security = daemonSetContainer(objects).securityContext as { appArmorProfile?: unknown };
      return { annotation: ds.spec.template.metadata.annotations[annotationKey], field: security.appArmorProfile };
    }
    const field = { annotation: undefined, field: { type: 'Unconfined' } };
    const annotation = { annotation: 'unconfined', field: undefined };
    assert.deepEqual(await appArmor('v1.29.9'), annotation);
    assert.deepEqual(await appArmor('v1.30.0'), field);
    assert.deepEqual(await appArmor('v1.31.2-gke.1000'), field);
    assert.deepEqual(await appArmor('v1.34.12'), field);
    assert.deepEqual(await appArmor('v1.34.12', 'useAppArmorAnnotation=null'), field);
    assert.deepEqual(await appArmor('v1.34.12', 'useAppArmorAnnotation=true'), annotation);
    assert.deepEqual(await appArmor('v1.34.12', 'cni.useAppArmorAnnotation=true'), annotation);
    assert.deepEqual(await appArmor('v1.29.9', 'useAppArmorAnnotation=false'), field);
    // The checked-in rendering is for the rig's Kubernetes (1.34): no deprecated annotation in it.
    assert.ok(!readFileSync(DEFAULT_MANIFEST, 'utf8').includes(annotationKey));
  });

  test("the default rendering applies to the rig's kube-apiserver without a warning; the AppArmor annotation draws one", async () => {
    const cluster = await startCluster();
    try {
      await cluster.ensureNamespace(RELEASE_NAMESPACE);
      assert.deepEqual(await applyObjects(cluster.api, parseManifest(readFileSync(DEFAULT_MANIFEST, 'utf8'))), []);
      const annotated = findObject(await render('useAppArmorAnnotation=true'), 'DaemonSet', 'istio-cni-node');
      annotated.metadata.name = 'istio-cni-node-annotated';
      const warnings = await applyObjects(cluster.api, [annotated]);
      assert.equal(warnings.length, 1, warnings.join('\n'));
      assert.match(warnings[0] ?? '', /apparmor.*deprecated since v1\.30.*appArmorProfile/);
    } finally {
      await cluster.stop();
    }
  });

  test('taint.enabled: the agent may remove taints from its own Node only (an admission policy, on the rig API server)', async () => {
    const cluster = await startCluster();
    try {
      await cluster.ensureNamespace(RELEASE_NAMESPACE);
      const objects = await render('taint.enabled=true');
      assert.deepEqual(
        objects.filter((o) => o.kind.startsWith('ValidatingAdmissionPolicy')).map((o) => o.kind),
        ['ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'],
      );
      await applyObjects(cluster.api, objects);
      const taint = { key: 'cni.istio.io/not-ready', effect: 'NoSchedule' };
      for (const name of ['node-a', 'node-b']) {
        await cluster.api.must('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name }, spec: { taints: [taint] } });
      }
      // The agent's pod on node-a and a token bound to it, as kubelet projects it: the API server
      // records the pod's node in the token's user info.
      const pod = await cluster.api.must<{ metadata: { name: string; uid: string } }>(
        'POST',
        `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods`,
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'istio-cni-node-a' },
          spec: { nodeName: 'node-a', serviceAccountName: 'istio-cni', containers: [{ name: 'install-cni', image: 'install-cni' }] },
        },
      );
      const tokenFor = async (boundObjectRef: Record<string, string>) =>
        (
          await cluster.api.must<{ status: { token: string } }>(
            'POST',
            `/api/v1/namespaces/${RELEASE_NAMESPACE}/serviceaccounts/istio-cni/token`,
            {
              apiVersion: 'authentication.k8s.io/v1',
              kind: 'TokenRequest',
              spec: { expirationSeconds: 3600, boundObjectRef },
            },
          )
        ).status.token;
      const agent = cluster.api.withToken(
        await tokenFor({ apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid }),
      );
      const removeTaint = [
        { op: 'test', path: '/spec/taints/0/key', value: taint.key },
        { op: 'remove', path: '/spec/taints/0' },
      ];
      const patch = (client: typeof agent, node: string, ops: unknown[], dryRun = false) =>
        client.request('PATCH', `/api/v1/nodes/${node}${dryRun ? '?dryRun=All' : ''}`, ops, { contentType: 'application/json-patch+json' });
      // The API server loads a new policy asynchronously: probe with dry runs (nothing persists) until it denies.
      await waitUntil('the admission policy in force', async () => (await patch(agent, 'node-b', removeTaint, true)).status !== 200);
      const other = await patch(agent, 'node-b', removeTaint);
      assert.equal(other.status, 403, other.text);
      assert.match(other.text, /istio-cni may change only its own Node: token of a pod on node-a, Node node-b/);
      const label = await patch(agent, 'node-a', [{ op: 'add', path: '/metadata/labels', value: { stolen: 'yes' } }]);
      assert.equal(label.status, 403, label.text);
      assert.match(label.text, /labels, annotations and unschedulable stay as they were/);
      const added = await patch(agent, 'node-a', [{ op: 'add', path: '/spec/taints/-', value: { key: 'x', effect: 'NoExecute' } }]);
      assert.equal(added.status, 403, added.text);
      const secret = await cluster.api.must<{ metadata: { uid: string } }>('POST', `/api/v1/namespaces/${RELEASE_NAMESPACE}/secrets`, {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'no-node' },
      });
      const unbound = cluster.api.withToken(
        await tokenFor({ apiVersion: 'v1', kind: 'Secret', name: 'no-node', uid: secret.metadata.uid }),
      );
      const noNode = await patch(unbound, 'node-a', removeTaint);
      assert.equal(noNode.status, 403, noNode.text);
      assert.match(noNode.text, /token of a pod on no node/);
      const own = await patch(agent, 'node-a', removeTaint);
      assert.equal(own.status, 200, own.text);
      // (The API server's TaintNodesByCondition adds node.kubernetes.io/not-ready to each new Node: left alone.)
      const nodes = await cluster.api.must<{ items: { metadata: { name: string }; spec: { taints?: { key: string }[] } }[] }>(
        'GET',
        '/api/v1/nodes',
      );
      assert.deepEqual(
        nodes.items.map((n) => [n.metadata.name, (n.spec.taints ?? []).some((t) => t.key === taint.key)]),
        [
          ['node-a', false],
          ['node-b', true],
        ],
      );
    } finally {
      await cluster.stop();
    }
  });

  test('each feature adds only its own permissions', async () => {
    const base = grants(await render('repair.enabled=false'));
    // The upgrade check reads its own DaemonSet in sidecar mode too: in the base role, unlike upstream.
    // Nodes as upstream's base role: upstream's agent reads its Node at shutdown, under this role
    // when `helm upgrade` switches a release from upstream's chart to ours (switch.test.ts).
    assert.deepEqual(base, [
      'apps/daemonsets:istio-cni-node get',
      'core/namespaces get',
      'core/namespaces list',
      'core/namespaces watch',
      'core/nodes get',
      'core/nodes list',
      'core/nodes watch',
      'core/pods get',
      'core/pods list',
      'core/pods watch',
    ]);
    const added = async (...set: string[]) => grants(await render('repair.enabled=false', ...set)).filter((g) => !base.includes(g));
    assert.deepEqual(await added('taint.enabled=true'), ['core/nodes patch']);
    assert.deepEqual(await added('ambient.enabled=true'), ['core/pods/status patch', 'core/pods/status update']);
    assert.deepEqual(await added('global.platform=openshift'), ['security.openshift.io/securitycontextconstraints:privileged use']);
    const repair = (...set: string[]) => render(...set).then(grants);
    assert.ok(!(await repair()).includes('core/pods delete'), 'repairPods (the default) deletes nothing');
    assert.ok((await repair('repair.repairPods=false', 'repair.deletePods=true')).includes('core/pods delete'));
    const label = await repair('repair.repairPods=false', 'repair.labelPods=true');
    assert.ok(label.includes('core/pods/status patch') && !label.includes('core/pods delete'));
    const taint = await render('taint.enabled=true');
    assert.ok(taint.some((o) => o.kind === 'ClusterRoleBinding' && (o.roleRef as { name: string }).name === 'istio-cni-taint'));
  });

  test('verify.* reaches the daemon as VERIFY_INTERVAL / VERIFY_REPORT_ONLY; an interval that is no Go duration fails the render', async () => {
    const defaults = configData(await render());
    assert.equal(defaults.VERIFY_INTERVAL, '60s');
    assert.equal(defaults.VERIFY_REPORT_ONLY, 'false');
    const set = configData(await render('verify.interval=2m30s', 'verify.reportOnly=true'));
    assert.equal(set.VERIFY_INTERVAL, '2m30s');
    assert.equal(set.VERIFY_REPORT_ONLY, 'true');
    // `--set` reads a bare 0 as a number: it still reaches the daemon as "0" (off).
    assert.equal(configData(await render('verify.interval=0')).VERIFY_INTERVAL, '0');
    for (const bad of ['60', '1 m', 'soon']) {
      await assert.rejects(render(`verify.interval=${bad}`), /verify\.interval=.* is not a Go duration/);
    }
    await assert.rejects(render('verify.intervl=5s'), /value verify\.intervl=5s is not used by this chart/);
  });

  test('taint.* reaches the daemon as NODE_TAINT_ENABLED / NODE_TAINT_KEY; NODE_NAME comes from the downward API', async () => {
    const off = configData(await render());
    assert.equal(off.NODE_TAINT_ENABLED, 'false');
    assert.equal(off.NODE_TAINT_KEY, 'cni.istio.io/not-ready');
    const on = await render('taint.enabled=true', 'taint.key=example.com/cni-not-ready');
    assert.equal(configData(on).NODE_TAINT_ENABLED, 'true');
    assert.equal(configData(on).NODE_TAINT_KEY, 'example.com/cni-not-ready');
    const container = daemonSetContainer(on);
    assert.deepEqual(container.envFrom, [{ configMapRef: { name: 'istio-cni-config' } }]);
    const env = container.env as { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
    assert.equal(env.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
  });

  test('the ConfigMap names the owned-config setting the daemon reads', async () => {
    const data = configData(await render('istioOwnedCNIConfig=true'));
    assert.equal(data.ISTIO_OWNED_CNI_CONFIG, 'true');
    assert.equal(data.ISTIO_OWNED_CNI_CONFIG_FILENAME, '02-istio-cni.conflist');
    assert.equal(data.ISTIO_OWNED_CNI_CONF_FILENAME, undefined);
    const named = configData(
      await render(
        'istioOwnedCNIConfig=true',
        'istioOwnedCNIConfigFileName=01-mine.conflist',
        'cniConfFileName=10-x.conflist',
        'env.FOO=bar',
      ),
    );
    assert.equal(named.ISTIO_OWNED_CNI_CONFIG_FILENAME, '01-mine.conflist');
    assert.equal(named.CNI_CONF_NAME, '10-x.conflist');
    assert.equal(named.FOO, 'bar');
  });

  test('platform profiles set host paths; user values win over profiles', async () => {
    const k3s = hostPaths(await render('global.platform=k3s'));
    assert.equal(k3s['cni-net-dir'], '/var/lib/rancher/k3s/agent/etc/cni/net.d');
    assert.equal(k3s['cni-bin-dir'], '/var/lib/rancher/k3s/data/current/bin/');
    assert.equal(hostPaths(await render('global.platform=gke'))['cni-bin-dir'], '/home/kubernetes/bin');
    assert.ok((await render('global.platform=gke')).some((o) => o.kind === 'ResourceQuota'));
    const openshift = await render('global.platform=openshift');
    assert.equal(configData(openshift).CHAINED_CNI_PLUGIN, 'false');
    assert.equal(configData(openshift).CNI_CONF_NAME, 'istio-cni.conf');
    assert.ok(openshift.some((o) => o.kind === 'NetworkAttachmentDefinition'));
    assert.equal(configData(await render('global.platform=openshift', 'chained=true')).CHAINED_CNI_PLUGIN, 'true');
    assert.equal(hostPaths(await render('global.platform=k3s', 'cniConfDir=/custom'))['cni-net-dir'], '/custom');
    const ambient = await render('profile=ambient');
    assert.equal(configData(ambient).AMBIENT_ENABLED, 'true');
    assert.equal(hostPaths(ambient)['cni-netns-dir'], '/var/run/netns');
  });

  test('an unknown platform is refused, naming it', async () => {
    await assert.rejects(renderChart({ set: ['global.platform=nosuch'] }), (err: unknown) => {
      assert.ok(err instanceof CommandError);
      assert.match(err.stderr, /unknown platform "nosuch"/);
      return true;
    });
  });

  test('installBinariesInitContainer runs `install-cni install-binaries` into the host bin dir', async () => {
    const ds = findObject(await render('installBinariesInitContainer.enabled=true'), 'DaemonSet', 'istio-cni-node') as unknown as {
      spec: { template: { spec: { initContainers: { command: string[]; volumeMounts: { name: string; mountPath: string }[] }[] } } };
    };
    const init = ds.spec.template.spec.initContainers[0];
    assert.deepEqual(init?.command, ['install-cni', 'install-binaries']);
    assert.deepEqual(init?.volumeMounts, [{ name: 'cni-bin-dir', mountPath: '/host/opt/cni/bin' }]);
  });
});
