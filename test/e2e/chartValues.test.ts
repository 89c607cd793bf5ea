// The chart takes what operators pass to upstream's `cni` chart: values files written the upstream
// way (test/e2e/fixtures/upstream-values) render with every value they set visible in the result,
// profiles carry upstream's meaning, and a value the chart would not act on fails the render.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { findObject, parseManifest, renderChart, type KubeObject } from './support/chart.ts';
import { CommandError } from './support/runCommand.ts';

const FIXTURES = join(import.meta.dirname, 'fixtures/upstream-values');

interface Container {
  name: string;
  image: string;
  imagePullPolicy?: string;
  args: string[];
  env: { name: string; value?: string; valueFrom?: unknown }[];
  resources: Record<string, Record<string, string>>;
  securityContext: { seLinuxOptions?: Record<string, string>; seccompProfile?: { type: string } };
}
interface PodSpec {
  hostNetwork?: boolean;
  containers: Container[];
  initContainers?: Container[];
  volumes: { name: string; hostPath?: { path: string } }[];
}
interface DaemonSet {
  metadata: { labels: Record<string, string> };
  spec: { template: { metadata: { labels: Record<string, string>; annotations: Record<string, string> }; spec: PodSpec } };
}

/** A rendering and the views of it the checks read. */
class Rendering {
  readonly objects: KubeObject[];
  constructor(text: string) {
    this.objects = parseManifest(text);
  }
  get daemonSet(): DaemonSet {
    return findObject(this.objects, 'DaemonSet', 'istio-cni-node') as unknown as DaemonSet;
  }
  get container(): Container {
    const c = this.daemonSet.spec.template.spec.containers.find((x) => x.name === 'install-cni');
    assert.ok(c);
    return c;
  }
  get config(): Record<string, string> {
    return findObject(this.objects, 'ConfigMap', 'istio-cni-config').data as Record<string, string>;
  }
  hostPath(volume: string): string | undefined {
    return this.daemonSet.spec.template.spec.volumes.find((v) => v.name === volume)?.hostPath?.path;
  }
  env(name: string): string | undefined {
    return this.container.env.find((e) => e.name === name)?.value;
  }
  has(kind: string): boolean {
    return this.objects.some((o) => o.kind === kind);
  }
}

async function renderFile(file: string, extra: { kubeVersion?: string } = {}): Promise<Rendering> {
  return new Rendering(await renderChart({ values: [join(FIXTURES, file)], ...extra }));
}

/**
 * Where each chart value shows in a rendering. A value path a fixture sets must have an entry here,
 * so a fixture cannot carry a value the test does not look for.
 */
const WHERE: Record<string, (r: Rendering, value: unknown) => unknown> = {
  'global.hub': (r) => r.container.image.split('/install-cni:')[0],
  'global.tag': (r) => r.config.CURRENT_AGENT_VERSION,
  'global.imagePullPolicy': (r) => r.container.imagePullPolicy,
  'global.logging.level': (r) => r.container.args.find((a) => a.startsWith('--log_output_level='))?.slice(19),
  'global.logAsJson': (r) => r.container.args.includes('--log_as_json'),
  'global.istioNamespace': (r) => r.env('SYSTEM_NAMESPACE'),
  'global.imagePullSecrets': (r) =>
    (findObject(r.objects, 'ServiceAccount', 'istio-cni').imagePullSecrets as { name: string }[]).map((s) => s.name),
  'global.platform': () => undefined,
  'global.profile': () => undefined,
  hub: (r) => r.container.image.split('/install-cni:')[0],
  tag: (r) => r.config.CURRENT_AGENT_VERSION,
  variant: (r) => r.container.image.split('-').at(-1),
  pullPolicy: (r) => r.container.imagePullPolicy,
  'logging.level': (r) => r.container.args.find((a) => a.startsWith('--log_output_level='))?.slice(19),
  excludeNamespaces: (r) => r.config.EXCLUDE_NAMESPACES?.split(','),
  cniConfFileName: (r) => r.config.CNI_CONF_NAME,
  cniBinDir: (r) => r.hostPath('cni-bin-dir'),
  cniConfDir: (r) => r.hostPath('cni-net-dir'),
  cniNetnsDir: (r) => r.hostPath('cni-netns-dir'),
  chained: (r) => r.config.CHAINED_CNI_PLUGIN === 'true',
  revision: (r) => r.daemonSet.metadata.labels['istio.io/rev'],
  ownerName: (r) => r.daemonSet.metadata.labels['install.operator.istio.io/owning-resource'],
  'resources.requests.cpu': (r) => r.container.resources.requests?.cpu,
  'resources.requests.memory': (r) => r.container.resources.requests?.memory,
  'resources.limits.memory': (r) => r.container.resources.limits?.memory,
  'podAnnotations.example.com/team': (r) => r.daemonSet.spec.template.metadata.annotations['example.com/team'],
  'env.EXTRA_SETTING': (r) => r.env('EXTRA_SETTING') === r.config.EXTRA_SETTING && r.env('EXTRA_SETTING'),
  'ambient.enabled': (r) => r.config.AMBIENT_ENABLED === 'true',
  'ambient.dnsCapture': (r) => r.config.AMBIENT_DNS_CAPTURE === 'true',
  'ambient.ipv6': (r) => r.config.AMBIENT_IPV6 === 'true',
  'ambient.reconcileIptablesOnStartup': (r) => r.config.AMBIENT_RECONCILE_POD_RULES_ON_STARTUP === 'true',
  'ambient.shareHostNetworkNamespace': (r) => r.daemonSet.spec.template.spec.hostNetwork === true,
  'repair.repairPods': (r) => r.config.REPAIR_REPAIR_PODS === 'true',
  'repair.deletePods': (r) => r.config.REPAIR_DELETE_PODS === 'true',
  profile: () => undefined,
  platform: () => undefined,
  compatibilityVersion: () => undefined,
};

/** The leaves a values file sets, `cni.` prefix taken off (it means the same value); maps in WHERE are leaves. */
function leafPaths(file: string): [string, unknown][] {
  const doc = parse(readFileSync(join(FIXTURES, file), 'utf8')) as Record<string, unknown>;
  const out: [string, unknown][] = [];
  const walk = (node: unknown, path: string[]): void => {
    if (node !== null && typeof node === 'object' && !Array.isArray(node) && !(path.join('.') in WHERE)) {
      for (const [k, v] of Object.entries(node)) walk(v, path.length === 0 && k === 'cni' ? [] : [...path, k]);
      return;
    }
    out.push([path.join('.'), node]);
  };
  walk(doc, []);
  return out;
}

describe('upstream-style values files', () => {
  const files = readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.yaml'))
    .sort();

  test('the fixtures cover the default, ambient, cni.-prefixed, every profile and platform, and each compatibility version', () => {
    for (const name of ['default', 'ambient', 'legacy-cni-prefix', 'platform-gke', 'platform-openshift', 'platform-k3d']) {
      assert.ok(files.includes(`${name}.yaml`), name);
    }
    const profiles = readdirSync(join(import.meta.dirname, '../../manifests/charts/istio-cni/files'));
    for (const p of profiles) {
      const name = p.replace(/^profile-/, '');
      const fixture = name.startsWith('platform-') || name.startsWith('compatibility-version-') ? name : `profile-${name}`;
      assert.ok(files.includes(fixture), `no fixture renders files/${p}`);
    }
  });

  for (const file of files) {
    test(`${file}: every value it sets shows in the rendering`, async () => {
      const r = await renderFile(file);
      for (const [path, value] of leafPaths(file)) {
        const where = WHERE[path];
        assert.ok(where, `${file} sets ${path}, which this test does not know where to look for`);
        const shown = where(r, value);
        if (shown === undefined && ['profile', 'platform', 'compatibilityVersion', 'global.platform', 'global.profile'].includes(path))
          continue;
        assert.deepEqual(shown, value, `${file}: ${path}`);
      }
    });
  }
});

describe('profiles keep upstream meaning', () => {
  test('profile=ambient enables ambient; compatibility versions up to 1.28 turn start-up reconciliation off', async () => {
    assert.equal((await renderFile('profile-ambient.yaml')).config.AMBIENT_ENABLED, 'true');
    for (const v of ['1.25', '1.26', '1.27', '1.28']) {
      assert.equal((await renderFile(`compatibility-version-${v}.yaml`)).config.AMBIENT_RECONCILE_POD_RULES_ON_STARTUP, 'false', v);
    }
    for (const v of ['1.29', '1.30']) {
      assert.equal((await renderFile(`compatibility-version-${v}.yaml`)).config.AMBIENT_RECONCILE_POD_RULES_ON_STARTUP, 'true', v);
    }
    const v125 = await renderFile('compatibility-version-1.25.yaml');
    assert.equal(v125.daemonSet.spec.template.spec.hostNetwork, true, '1.25 shared the host network namespace');
    assert.equal(v125.env('ALLOW_SWITCH_TO_HOST_NS'), undefined);
    // --set parses 1.28 as a number: it still names the file.
    const numeric = new Rendering(await renderChart({ set: ['compatibilityVersion=1.28', 'ambient.enabled=true'] }));
    assert.equal(numeric.config.AMBIENT_RECONCILE_POD_RULES_ON_STARTUP, 'false');
    const thirty = new Rendering(await renderChart({ set: ['compatibilityVersion=1.30'] }));
    assert.equal(thirty.config.AMBIENT_RECONCILE_POD_RULES_ON_STARTUP, 'true');
  });

  test('demo lowers requests, also from global.profile; stable, preview, remote and default change nothing for this chart', async () => {
    for (const file of ['profile-demo.yaml', 'global-profile-demo.yaml']) {
      assert.deepEqual((await renderFile(file)).container.resources, { requests: { cpu: '10m', memory: '40Mi' } }, file);
    }
    const plain = JSON.stringify((await renderFile('profile-default.yaml')).objects);
    for (const p of ['stable', 'preview', 'remote']) {
      assert.equal(JSON.stringify((await renderFile(`profile-${p}.yaml`)).objects), plain, p);
    }
    // A value the user sets wins over the profile's.
    const mine = new Rendering(await renderChart({ set: ['profile=demo', 'resources.requests.cpu=200m'] }));
    assert.equal(mine.container.resources.requests?.cpu, '200m');
  });

  test('platform profiles: k3d, k3s, microk8s and minikube paths; openshift Multus, SCC and spc_t', async () => {
    const k3d = await renderFile('platform-k3d.yaml');
    assert.equal(k3d.hostPath('cni-bin-dir'), '/bin');
    assert.equal(k3d.hostPath('cni-net-dir'), '/var/lib/rancher/k3s/agent/etc/cni/net.d');
    assert.equal((await renderFile('platform-k3s.yaml')).hostPath('cni-bin-dir'), '/var/lib/rancher/k3s/data/current/bin/');
    assert.equal((await renderFile('platform-microk8s.yaml')).hostPath('cni-bin-dir'), '/var/snap/microk8s/current/opt/cni/bin');
    assert.equal((await renderFile('platform-minikube.yaml')).hostPath('cni-netns-dir'), '/var/run/docker/netns');
    for (const file of ['platform-openshift.yaml', 'profile-openshift.yaml', 'profile-openshift-ambient.yaml']) {
      const os = await renderFile(file);
      assert.equal(os.config.CHAINED_CNI_PLUGIN, 'false', file);
      assert.equal(os.hostPath('cni-bin-dir'), '/var/lib/cni/bin', file);
      assert.ok(os.has('NetworkAttachmentDefinition'), file);
      const role = findObject(os.objects, 'ClusterRole', 'istio-cni').rules as { apiGroups: string[] }[];
      assert.ok(
        role.some((rule) => rule.apiGroups.includes('security.openshift.io')),
        `${file}: the SCC grant`,
      );
    }
    assert.equal((await renderFile('platform-openshift.yaml')).container.securityContext.seLinuxOptions?.type, 'spc_t');
    assert.equal((await renderFile('profile-openshift-ambient.yaml')).config.AMBIENT_ENABLED, 'true');
  });

  test("seccomp: the runtime's default profile on both containers unless seccompProfile is null", async () => {
    const defaults = new Rendering(await renderChart({ set: ['installBinariesInitContainer.enabled=true'] }));
    const pod = defaults.daemonSet.spec.template.spec;
    for (const c of [...pod.containers, ...(pod.initContainers ?? [])]) {
      assert.deepEqual(c.securityContext.seccompProfile, { type: 'RuntimeDefault' }, c.name);
    }
    assert.equal(pod.initContainers?.length, 1);
    const unset = new Rendering(await renderChart({ set: ['seccompProfile=null'] }));
    assert.equal(unset.container.securityContext.seccompProfile, undefined);
  });

  test('gke: /home/kubernetes/bin from the platform profile, a ResourceQuota; your cniBinDir wins; no platform, no change', async () => {
    for (const kubeVersion of ['v1.31.2-gke.1000', 'v1.31.2']) {
      const gke = await renderFile('platform-gke.yaml', { kubeVersion });
      assert.equal(gke.hostPath('cni-bin-dir'), '/home/kubernetes/bin', kubeVersion);
      assert.ok(gke.has('ResourceQuota'));
    }
    assert.equal(
      (await renderFile('platform-gke-user-bin-dir.yaml', { kubeVersion: 'v1.31.2-gke.1000' })).hostPath('cni-bin-dir'),
      '/var/lib/cni-custom',
    );
    // Without the gke platform the chart default stands, even on a GKE cluster (as upstream).
    assert.equal(new Rendering(await renderChart({ kubeVersion: 'v1.31.2-gke.1000' })).hostPath('cni-bin-dir'), '/opt/cni/bin');
  });
});

describe('labels, runtime memory and host mounts', () => {
  test('every object carries upstream labels', async () => {
    const r = await renderFile('default.yaml');
    for (const o of r.objects) {
      const labels = o.metadata.labels ?? {};
      for (const key of [
        'istio.io/rev',
        'app.kubernetes.io/name',
        'app.kubernetes.io/instance',
        'app.kubernetes.io/version',
        'app.kubernetes.io/part-of',
        'app.kubernetes.io/managed-by',
        'helm.sh/chart',
        'operator.istio.io/component',
      ]) {
        assert.ok(key in labels, `${o.kind}/${o.metadata.name} lacks ${key}`);
      }
      assert.equal(labels['istio.io/rev'], 'canary');
      assert.match(labels['helm.sh/chart'] ?? '', /^cni-/);
    }
    assert.equal(r.daemonSet.spec.template.metadata.labels['istio.io/rev'], 'canary');
  });

  test('the memory limit becomes the daemon heap limit (3/4) next to GOMEMLIMIT; none without a limit', async () => {
    const limited = await renderFile('default.yaml');
    assert.equal(limited.env('NODE_OPTIONS'), '--max-old-space-size=384');
    assert.ok(limited.container.env.some((e) => e.name === 'GOMEMLIMIT'));
    const sized = async (limit: string) =>
      new Rendering(await renderChart({ set: [`resources.limits.memory=${limit}`] })).env('NODE_OPTIONS');
    assert.equal(await sized('1Gi'), '--max-old-space-size=768');
    assert.equal(await sized('200M'), '--max-old-space-size=143');
    assert.equal(await sized('1.5Gi'), '--max-old-space-size=1152');
    assert.equal(new Rendering(await renderChart()).env('NODE_OPTIONS'), undefined);
    const own = new Rendering(await renderChart({ set: ['resources.limits.memory=1Gi', 'env.NODE_OPTIONS=--max-old-space-size=100'] }));
    assert.deepEqual(
      own.container.env.filter((e) => e.name === 'NODE_OPTIONS').map((e) => e.value),
      ['--max-old-space-size=100'],
    );
    await assert.rejects(renderChart({ set: ['resources.limits.memory=lots'] }), /resources.limits.memory "lots"/);
  });

  test('/host/proc follows repairPods or ambient (even with repair disabled); the netns volume is always there', async () => {
    const noRepair = new Rendering(await renderChart({ set: ['repair.enabled=false'] }));
    assert.equal(noRepair.hostPath('cni-host-procfs'), '/proc');
    assert.equal(noRepair.hostPath('cni-netns-dir'), '/var/run/netns');
    const none = new Rendering(await renderChart({ set: ['repair.repairPods=false'] }));
    assert.equal(none.hostPath('cni-host-procfs'), undefined);
    assert.equal(none.hostPath('cni-netns-dir'), '/var/run/netns');
  });
});

describe('values the chart would not act on fail the render, naming them', () => {
  const refuses = async (set: string[], message: RegExp) => {
    await assert.rejects(renderChart({ set }), (err: unknown) => {
      assert.ok(err instanceof CommandError);
      assert.match(err.stderr, message);
      return true;
    });
  };

  test('unknown or unimplemented values, top level and under cni.', async () => {
    await refuses(['privileged=true'], /value privileged=true is not used by this chart/);
    await refuses(['cni.logLevel=debug'], /value cni\.logLevel=debug is not used/);
    await refuses(['ambient.redirectMode=ebpf'], /value ambient\.redirectMode=ebpf is not used/);
    await refuses(['ambient.configDir=/etc/ambient-config'], /value ambient\.configDir=/);
    await refuses(['repair.hub=example.com'], /value repair\.hub=example\.com is not used/);
    await refuses(['cni.global.hub=x'], /cni\.global is not read/);
    // Left empty (as in a copy of upstream's values.yaml), they are harmless.
    await renderChart({ set: ['privileged=false', 'ambient.configDir=', 'cni.psp_cluster_role='] });
  });

  test('unknown profile, platform and compatibility version name themselves and the known ones', async () => {
    await refuses(['profile=nosuch'], /unknown profile "nosuch" \(profiles: .*demo.*\)/);
    await refuses(['global.platform=nosuch'], /unknown platform "nosuch" \(platforms: .*k3d.*\)/);
    await refuses(['compatibilityVersion=1.10'], /unknown compatibilityVersion "1.10" \(versions: 1.25, .*1.30\)/);
  });
});
