/**
 * Continuous verification (root, real kernel): `dist/install-cni` with a 1 s VERIFY_INTERVAL, a
 * sidecar pod and a plain pod added through the built plugin, then drift injected into their real
 * netns by hand, per rule backend. The agent repairs a sidecar pod's rules exactly once (the netns
 * ends as the ADD left it), counts `istio_cni_drift_total{kind,action}` and logs one line naming
 * the pod; Istio state in a plain pod is reported, never removed; report-only repairs nothing.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it, type TestContext } from 'node:test';
import type { DaemonProcess } from '../support/daemonProcess.ts';
import { metric, morePasses } from '../support/daemonMetrics.ts';
import { plainPod, sidecarPod } from '../support/meshPods.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { runDoctor } from '../support/runDoctor.ts';
import { createPodNetworkFixture, type PodNetworkFixture } from '../support/podNetworkFixture.ts';
import type { AgentRig, PodAttachment } from '../support/startAgentRig.ts';
import { verifyingRig } from '../support/verifyingRig.ts';

interface Backend {
  name: string;
  env: Record<string, string>;
  /** argv (inside the pod netns) that removes the outbound jump / all sidecar tables: nothing but missing pieces. */
  removeCapture: string[][];
  /** argv that adds a rule of ours the plan does not have. */
  changeCapture: string[][];
  /** argv that puts Istio-named state into a pod outside the mesh. */
  strayState: string[][];
}

const xtables = (bin: string): Omit<Backend, 'name' | 'env'> => ({
  removeCapture: [[bin, '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT']],
  changeCapture: [[bin, '-t', 'nat', '-I', 'ISTIO_OUTPUT', '1', '-d', '192.0.2.1/32', '-j', 'RETURN']],
  strayState: [[bin, '-t', 'nat', '-N', 'ISTIO_STRAY']],
});

const backends: Backend[] = [
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' }, ...xtables('iptables-legacy') },
  { name: 'iptables-nft', env: { FORCE_IPTABLES_BINARY: 'nft' }, ...xtables('iptables-nft') },
  {
    name: 'nft',
    env: { NATIVE_NFTABLES: 'true' },
    removeCapture: [['nft', 'delete', 'table', 'inet', 'istio-proxy-nat']],
    changeCapture: [['nft', 'insert', 'rule', 'inet', 'istio-proxy-nat', 'istio-output', 'ip', 'daddr', '192.0.2.1', 'return']],
    strayState: [['nft', 'add', 'table', 'inet', 'istio-proxy-stray']],
  },
];

function inNetns(netns: string, commands: string[][]): void {
  for (const argv of commands) execFileSync('nsenter', [`--net=${netns}`, '--', ...argv], { stdio: 'pipe' });
}

function driftLines(daemon: DaemonProcess, pod: string): Record<string, unknown>[] {
  return daemon.lines
    .map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return {};
      }
    })
    .filter((e) => e.msg === 'pod drifted from its plan' && e.pod === pod);
}

async function addPod(t: TestContext, rig: AgentRig, pod: ReturnType<typeof sidecarPod>, containerId: string) {
  const net: PodNetworkFixture = createPodNetworkFixture(t);
  const attachment: PodAttachment = { netns: net.pod.path, containerId, address: `${net.pod.ipv4}/24`, gateway: net.node.ipv4 };
  const res = await rig.exec('ADD', pod, attachment);
  assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
  return net;
}

for (const backend of backends) {
  describe(`[${backend.name}] continuous verification repairs drift`, { skip: kernelSkip, timeout: 180_000 }, () => {
    const agent = verifyingRig({ ...backend.env });

    it('removed and changed capture rules are repaired once each, counted and logged', async (t) => {
      const rig = agent();
      const pod = sidecarPod('default', `web-${backend.name}`);
      rig.api.upsertPod(pod);
      const net = await addPod(t, rig, pod, `c-web-${backend.name}`);
      const programmed = await netnsRuleset(net.pod.path);
      const name = `default/${pod.metadata.name}`;

      for (const [kind, inject] of [
        ['rules_missing', backend.removeCapture],
        ['rules_changed', backend.changeCapture],
      ] as const) {
        inNetns(net.pod.path, inject);
        assert.notEqual(await netnsRuleset(net.pod.path), programmed, 'drift injected');
        const line = await rig.daemon.waitForLog(
          (e) => e.msg === 'pod drifted from its plan' && e.pod === name && JSON.stringify(e.drift).includes(kind),
          20_000,
        );
        assert.equal(line.action, 'repaired', JSON.stringify(line));
        assert.equal(line.level, 'warn');
        assert.equal(await netnsRuleset(net.pod.path), programmed, `${kind}: the netns is back to what ADD programmed`);
        await morePasses(rig.daemon, 2);
        assert.equal(await metric(rig.daemon, 'istio_cni_drift_total', { kind, action: 'repaired' }), 1, `${kind} counted once`);
      }
      assert.equal(driftLines(rig.daemon, name).length, 2, 'one log line per drift, none for the healthy passes after');
    });

    it('Istio state in a pod outside the mesh is reported, never removed', async (t) => {
      const rig = agent();
      const pod = plainPod('default', `plain-${backend.name}`);
      rig.api.upsertPod(pod);
      const net = await addPod(t, rig, pod, `c-plain-${backend.name}`);
      inNetns(net.pod.path, backend.strayState);
      const injected = await netnsRuleset(net.pod.path);
      const line = await rig.daemon.waitForLog(
        (e) => e.msg === 'pod drifted from its plan' && e.pod === `default/${pod.metadata.name}`,
        20_000,
      );
      assert.equal(line.action, 'reported');
      assert.match(JSON.stringify(line.drift), /unexpected_rules/);
      assert.equal(await netnsRuleset(net.pod.path), injected, 'left as found');
      assert.ok((await metric(rig.daemon, 'istio_cni_drift_total', { kind: 'unexpected_rules', action: 'reported' })) >= 1);
    });
  });
}

describe('[report-only] continuous verification reports and repairs nothing', { skip: kernelSkip, timeout: 120_000 }, () => {
  const agent = verifyingRig({ VERIFY_REPORT_ONLY: 'true', FORCE_IPTABLES_BINARY: 'nft' });

  it('a removed capture jump is reported once and left as found; doctor shows it (exit 1), then the daemon down (exit 2)', async (t) => {
    const rig = agent();
    const pod = sidecarPod('default', 'web-report');
    rig.api.upsertPod(pod);
    const net = await addPod(t, rig, pod, 'c-web-report');
    const healthy = runDoctor(rig, []);
    assert.equal(healthy.code, 0, healthy.stdout);
    assert.deepEqual(healthy.report.problems, []);
    inNetns(net.pod.path, xtables('iptables-nft').removeCapture);
    const afterInjection = await netnsRuleset(net.pod.path);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/web-report', 20_000);
    assert.equal(line.action, 'reported');
    assert.equal(line.reportOnly, true);
    // Wait for two more checks that found the drift: the loop looked again and still changed nothing.
    const seen = await metric(rig.daemon, 'istio_cni_pod_verifications_total', { result: 'drift' });
    while ((await metric(rig.daemon, 'istio_cni_pod_verifications_total', { result: 'drift' })) < seen + 2) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(await netnsRuleset(net.pod.path), afterInjection);
    assert.equal(
      await metric(rig.daemon, 'istio_cni_drift_total', { kind: 'rules_missing', action: 'reported' }),
      1,
      'counted once while unchanged',
    );
    assert.equal(await metric(rig.daemon, 'istio_cni_drift_total', { kind: 'rules_missing', action: 'repaired' }), 0);
    assert.equal(driftLines(rig.daemon, 'default/web-report').length, 1, 'logged once while unchanged');

    const shown = runDoctor(rig, ['default/web-report']);
    assert.equal(shown.code, 1, shown.stdout);
    const pods = shown.report.daemon.pods as { pod: string; status: string; drift: { kind: string; detail: string }[] }[];
    assert.deepEqual(
      pods.map((p) => [p.pod, p.status, p.drift.map((d) => d.kind)]),
      [['default/web-report', 'drift', ['rules_missing']]],
    );
    assert.match(pods[0]?.drift[0]?.detail ?? '', /nat OUTPUT: missing "-j ISTIO_OUTPUT"/);
    assert.equal(await netnsRuleset(net.pod.path), afterInjection, 'doctor repaired nothing');

    await rig.daemon.stop();
    const down = runDoctor(rig, []);
    assert.equal(down.code, 2, down.stdout);
    assert.equal(down.report.daemon.reachable, false);
    // A stopped daemon uninstalls (not an upgrade): the node checks say so without it.
    const node = (down.report as unknown as { node: { cniConfig: { file: string | null } } }).node;
    assert.equal(node.cniConfig.file, null, 'istio-cni no longer in the chain');
    assert.ok(down.report.problems.some((p) => p.startsWith('daemon unreachable')));
    assert.ok(down.report.problems.some((p) => p.includes('names istio-cni')));
  });
});

describe('[restart] pods handled by an earlier run are verified by the next', { skip: kernelSkip, timeout: 120_000 }, () => {
  const agent = verifyingRig({ FORCE_IPTABLES_BINARY: 'nft' });

  it('drift in a pod added before the restart is repaired by the restarted agent', async (t) => {
    const rig = agent();
    const pod = sidecarPod('default', 'web-restart');
    rig.api.upsertPod(pod);
    const net = await addPod(t, rig, pod, 'c-web-restart');
    const programmed = await netnsRuleset(net.pod.path);
    await rig.daemon.stop();
    await rig.restartDaemon();
    inNetns(net.pod.path, xtables('iptables-nft').removeCapture);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/web-restart', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    assert.equal(await netnsRuleset(net.pod.path), programmed);
  });
});

describe('[adopted] a pod whose rules live in the backend the node did not choose', { skip: kernelSkip, timeout: 120_000 }, () => {
  // Not forced: the node's backend is decided (decideIptablesBackend) and the other one is adoptable.
  const agent = verifyingRig({});

  it('is verified where its rules are: no drift pass after pass, and a flush there is repaired there', async (t) => {
    const rig = agent();
    const pod = sidecarPod('default', 'web-adopted');
    rig.api.upsertPod(pod);
    const net = await addPod(t, rig, pod, 'c-web-adopted');
    const nodeFlavor = (runDoctor(rig, []).report.daemon.backend as string).replace('iptables-', '');
    assert.ok(nodeFlavor === 'nft' || nodeFlavor === 'legacy', `an iptables backend: ${nodeFlavor}`);
    const other = nodeFlavor === 'nft' ? 'legacy' : 'nft';
    // Move the pod's rules to the other backend, as a pod programmed before a node changed backends.
    for (const family of ['iptables', 'ip6tables']) {
      const saved = execFileSync('nsenter', [`--net=${net.pod.path}`, '--', `${family}-${nodeFlavor}-save`], { encoding: 'utf8' });
      if (!saved.includes(':ISTIO_')) continue;
      execFileSync('nsenter', [`--net=${net.pod.path}`, '--', `${family}-${other}-restore`], { input: saved });
      for (const [, table] of saved.matchAll(/^\*(\w+)$/gm)) {
        inNetns(net.pod.path, [
          [`${family}-${nodeFlavor}`, '-t', table ?? '', '-F'],
          [`${family}-${nodeFlavor}`, '-t', table ?? '', '-X'],
        ]);
      }
    }
    const moved = await netnsRuleset(net.pod.path);
    await morePasses(rig.daemon, 3);
    assert.deepEqual(driftLines(rig.daemon, 'default/web-adopted'), [], 'not drift: its rules are in place where they live');
    assert.equal(await netnsRuleset(net.pod.path), moved, 'nothing rewritten, nothing copied into the node backend');
    assert.equal(runDoctor(rig, ['default/web-adopted']).code, 0);

    inNetns(net.pod.path, xtables(`iptables-${other}`).removeCapture);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/web-adopted', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    assert.equal(await netnsRuleset(net.pod.path), moved, 'repaired in the backend it lives in');
    await morePasses(rig.daemon, 3);
    assert.equal(driftLines(rig.daemon, 'default/web-adopted').length, 1, 'repaired once, then in place');
  });
});
