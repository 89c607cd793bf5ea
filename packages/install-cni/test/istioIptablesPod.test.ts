import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { stringify as toYaml } from 'yaml';
import { dryRunDocuments, readPluginGolden, runCommand, trimmed } from './istioIptablesHarness.ts';
import { PLUGIN_GOLDEN_CASES, type PluginCase } from '../../capture/test/pluginGoldenCases.ts';

const dir = mkdtempSync(join(tmpdir(), 'istio-iptables-pod-'));
after(() => rmSync(dir, { recursive: true, force: true }));

type PodCase = PluginCase;
const CASES = PLUGIN_GOLDEN_CASES;

function podManifest(c: Omit<PodCase, 'name' | 'golden'>, statusAnnotation = true): Record<string, unknown> {
  const securityContext = {
    ...(c.runAsUser === undefined ? {} : { runAsUser: c.runAsUser }),
    ...(c.runAsGroup === undefined ? {} : { runAsGroup: c.runAsGroup }),
  };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: 'testPod',
      namespace: 'testNS',
      annotations: { ...(statusAnnotation ? { 'sidecar.istio.io/status': 'true' } : {}), ...c.annotations },
    },
    spec: {
      containers: [
        { name: 'test', image: 'app' },
        { name: 'istio-proxy', args: ['proxy', 'sidecar'], env: c.env ?? [], securityContext },
        { name: 'istio-validate' },
      ],
    },
    status: { podIP: '10.0.0.5' },
  };
}

let fileCount = 0;
function writeManifest(text: string, ext: string): string {
  const path = join(dir, `pod-${++fileCount}.${ext}`);
  writeFileSync(path, text);
  return path;
}

for (const [i, c] of CASES.entries()) {
  // Alternate the formats so both readers see every kind of field.
  const format = i % 2 === 0 ? 'yaml' : 'json';
  test(`--pod ${c.name} (${format}): prints the plugin golden's rules`, async () => {
    const manifest = podManifest(c);
    const path = writeManifest(format === 'yaml' ? toYaml(manifest) : JSON.stringify(manifest, null, 2), format);
    const run = await runCommand(['--pod', path, '--dry-run'], { env: { ENABLE_INBOUND_IPV6: 'false' } });
    assert.equal(run.exitCode, 0, run.stderr);
    assert.deepEqual(run.runner.calls, []);
    assert.equal(trimmed(dryRunDocuments(run.stdout)), trimmed(readPluginGolden(c.golden)));
  });
}

test('--pod with YAML and JSON of the same pod prints the same documents, iptables and nftables', async () => {
  const manifest = podManifest({
    annotations: { 'sidecar.istio.io/interceptionMode': 'TPROXY' },
    env: [{ name: 'ISTIO_META_DNS_CAPTURE', value: 'true' }],
  });
  const yamlPath = writeManifest(toYaml(manifest), 'yaml');
  const jsonPath = writeManifest(JSON.stringify(manifest), 'json');
  for (const extra of [[], ['--native-nftables']]) {
    const a = await runCommand(['--pod', yamlPath, '-n', ...extra], { env: { ENABLE_INBOUND_IPV6: 'true' } });
    const b = await runCommand(['--pod', jsonPath, '-n', ...extra], { env: { ENABLE_INBOUND_IPV6: 'true' } });
    assert.equal(a.exitCode, 0, a.stderr);
    assert.equal(a.stdout, b.stdout);
    assert.ok(a.stdout.length > 0);
  }
});

test('--pod: ISTIO_DUAL_STACK on the proxy makes any global IPv6 address in the netns enable IPv6 rules', async () => {
  const path = writeManifest(toYaml(podManifest({ env: [{ name: 'ISTIO_DUAL_STACK', value: 'true' }] })), 'yaml');
  const addrs = JSON.stringify([
    { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] },
    {
      ifname: 'eth0',
      addr_info: [
        { family: 'inet', local: '10.0.0.5', scope: 'global' },
        { family: 'inet6', local: 'fd00::5', scope: 'global' },
      ],
    },
  ]);
  const run = await runCommand(['--pod', path, '-n'], { respond: () => ({ stdout: addrs, stderr: '' }) });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.deepEqual(
    run.runner.calls.map((c) => c.argv),
    [['ip', '-j', 'addr', 'show']],
    'only the read-only address probe runs',
  );
  assert.match(run.stdout, /# ip6tables-restore --noflush\n/);
});

test('--pod: process-level ISTIO_OUTBOUND_OWNER_GROUPS applies, as in the plugin', async () => {
  const path = writeManifest(toYaml(podManifest({})), 'yaml');
  const run = await runCommand(['--pod', path, '-n'], { env: { ENABLE_INBOUND_IPV6: 'false', ISTIO_OUTBOUND_OWNER_GROUPS: 'java' } });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.match(run.stdout, /-A ISTIO_OUTPUT -m owner ! --gid-owner java -j RETURN/);
});

test('--pod of a pod the plugin would not redirect prints nothing and says why', async () => {
  const path = writeManifest(toYaml(podManifest({}, false)), 'yaml');
  const run = await runCommand(['--pod', path, '-n'], { env: { ENABLE_INBOUND_IPV6: 'false' } });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.equal(run.stdout, '');
  assert.match(run.stderr, /no sidecar.istio.io\/status annotation/);
});

test('--pod with a bad annotation exits 2 naming the annotation and value; nothing runs', async () => {
  const path = writeManifest(
    toYaml(podManifest({ annotations: { 'traffic.sidecar.istio.io/includeInboundPorts': '80,-j ACCEPT' } })),
    'yaml',
  );
  const run = await runCommand(['--pod', path]);
  assert.equal(run.exitCode, 2);
  assert.match(run.stderr, /traffic\.sidecar\.istio\.io\/includeInboundPorts/);
  assert.match(run.stderr, /-j ACCEPT/);
  assert.deepEqual(run.runner.calls, []);
});

const BAD_MANIFESTS: readonly (readonly [string, string, RegExp])[] = [
  ['not YAML', 'metadata: [unclosed', /not YAML or JSON/],
  ['a list', '- a\n- b\n', /not an object/],
  ['another kind', 'kind: Service\nmetadata: {name: x}\n', /kind is "Service"/],
  ['no metadata', 'kind: Pod\nspec: {}\n', /metadata is missing/],
  [
    'an unquoted boolean annotation',
    'metadata:\n  annotations:\n    sidecar.istio.io/status: true\n',
    /metadata\.annotations\["sidecar\.istio\.io\/status"\] is not a string/,
  ],
  ['containers that are not a list', 'metadata: {}\nspec:\n  containers: {name: x}\n', /spec\.containers is not a list/],
  [
    'a string runAsUser',
    'metadata: {}\nspec:\n  containers:\n  - name: istio-proxy\n    securityContext: {runAsUser: "1337"}\n',
    /runAsUser is not an integer/,
  ],
  [
    'an env value that is a number',
    'metadata: {}\nspec:\n  containers:\n  - name: istio-proxy\n    env: [{name: INVALID_DROP, value: 1}]\n',
    /env\[0\]\.value is not a string/,
  ],
  ['two documents', 'metadata: {}\n---\nmetadata: {}\n', /not YAML or JSON/],
];

for (const [what, text, message] of BAD_MANIFESTS) {
  test(`--pod with ${what} exits 2 with a message naming the problem`, async () => {
    const path = writeManifest(text, 'yaml');
    const run = await runCommand(['--pod', path, '-n'], { env: { ENABLE_INBOUND_IPV6: 'false' } });
    assert.equal(run.exitCode, 2, run.stderr);
    assert.match(run.stderr, message);
    assert.match(run.stderr, /--pod/);
    assert.equal(run.stdout, '');
  });
}

test('--pod of a missing file exits 2 naming the file', async () => {
  const run = await runCommand(['--pod', join(dir, 'absent.yaml'), '-n']);
  assert.equal(run.exitCode, 2);
  assert.match(run.stderr, /absent\.yaml/);
});

test('--pod refuses a file larger than 1 MiB without reading it all', async () => {
  const run = await runCommand(['--pod', '/dev/zero', '-n']);
  assert.equal(run.exitCode, 2);
  assert.match(run.stderr, /larger than 1048576 bytes/);
});

for (const flag of [['-p', '15001'], ['--istio-inbound-ports', '*'], ['--redirect-dns'], ['--reroute-virtual-interfaces', 'eth0']]) {
  test(`--pod cannot be combined with the rule flag ${flag[0]}`, async () => {
    const path = writeManifest(toYaml(podManifest({})), 'yaml');
    const run = await runCommand(['--pod', path, '-n', ...flag]);
    assert.equal(run.exitCode, 2);
    assert.match(run.stderr, /cannot be combined with --pod/);
    assert.ok(run.stderr.includes(flag[0] ?? ''));
  });
}
