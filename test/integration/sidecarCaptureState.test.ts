import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import {
  applySidecarCapture,
  type CommandRunner,
  createExecCommandRunner,
  createScratchNetnsOpener,
  DataplaneError,
  detectIptablesBackend,
  type IptablesBackend,
  verifySidecarCapture,
} from '@istio-cni/dataplane';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';
import { sidecarRulePlan, type TestCaptureOptions, testCaptureConfig } from '../support/sidecarRulePlan.ts';

const backends = [
  { name: 'iptables-nft', rules: 'iptables', force: 'nft' },
  { name: 'iptables-legacy', rules: 'iptables', force: 'legacy' },
  { name: 'nft', rules: 'nft' },
] as const;

type Backend = (typeof backends)[number];

const configA: Omit<TestCaptureOptions, 'ipv6'> = { mode: 'REDIRECT' };
const configB: Omit<TestCaptureOptions, 'ipv6'> = { mode: 'TPROXY', excludeOutboundPorts: [9003] };

async function setUp(t: TestContext, backend: Backend) {
  const runner = createExecCommandRunner();
  const deps = { runner, openScratchNetns: createScratchNetnsOpener() };
  const iptablesBackend = backend.rules === 'iptables' ? await detectIptablesBackend(runner, { forceBinary: backend.force }) : undefined;
  const extra = iptablesBackend === undefined ? {} : { iptablesBackend };
  const apply = (netns: string, config: Omit<TestCaptureOptions, 'ipv6'>, reconcile = false) =>
    applySidecarCapture(deps, {
      netns,
      plan: ({ ipv6 }) => sidecarRulePlan(backend.rules, testCaptureConfig({ ...config, ipv6 })),
      tproxyRoutes: config.mode === 'TPROXY',
      dualStack: true,
      reconcile,
      ...extra,
    });
  const verify = (netns: string, config: Omit<TestCaptureOptions, 'ipv6'>) =>
    verifySidecarCapture(deps, { netns, plan: sidecarRulePlan(backend.rules, testCaptureConfig({ ...config, ipv6: true })), ...extra });
  const pod = createPodNetworkFixture(t).pod.path;
  return { runner, apply, verify, pod, snapshot: () => snapshot(runner, iptablesBackend, pod), iptablesBackend };
}

/** Everything rule-related in the netns, without comments and counters. */
async function snapshot(runner: CommandRunner, backend: IptablesBackend | undefined, netns: string): Promise<string> {
  if (backend === undefined) return (await runner.run(['nft', '-s', 'list', 'ruleset'], { netns })).stdout;
  const parts: string[] = [];
  for (const family of ['ipv4', 'ipv6'] as const) {
    const { stdout } = await runner.run([backend.binaries[family].save], { netns });
    const text = stdout
      .split('\n')
      .filter((l) => !l.startsWith('#'))
      .map((l) => l.replace(/\[\d+:\d+\]/, ''))
      .join('\n');
    // Legacy lists tables in the order the netns first loaded them; that order means nothing.
    parts.push(
      text
        .split(/^(?=\*)/m)
        .sort()
        .join(''),
    );
  }
  return parts.join('\n');
}

for (const backend of backends) {
  test(`[${backend.name}] applying the same config twice changes nothing`, { skip: kernelSkip, timeout: 60_000 }, async (t) => {
    const s = await setUp(t, backend);
    const first = await s.apply(s.pod, configA);
    assert.equal(first.ipv6, true);
    const before = await s.snapshot();
    const second = await s.apply(s.pod, configA);
    assert.deepEqual(second.outcome, backend.rules === 'nft' ? 'unchanged' : { ipv4: 'unchanged', ipv6: 'unchanged' });
    assert.equal(await s.snapshot(), before);
    assert.deepEqual(await s.verify(s.pod, configA), []);
  });

  test(`[${backend.name}] a changed config without reconcile fails clearly and changes nothing`, {
    skip: kernelSkip,
    timeout: 60_000,
  }, async (t) => {
    const s = await setUp(t, backend);
    await s.apply(s.pod, configA);
    const before = await s.snapshot();
    await assert.rejects(s.apply(s.pod, configB), (err: unknown) => {
      assert.ok(err instanceof DataplaneError);
      assert.equal(err.code, 'ERR_DATAPLANE_STATE_CONFLICT');
      assert.match(
        err.message,
        new RegExp(`^failed to apply .* in netns "${s.pod}": it already holds different .*reconcile would replace`),
      );
      return true;
    });
    assert.equal(await s.snapshot(), before);
    assert.ok((await s.verify(s.pod, configB)).length > 0, 'verify against the new config reports differences');
  });

  test(`[${backend.name}] reconcile converges and removes a foreign ISTIO_TEST chain`, {
    skip: kernelSkip,
    timeout: 60_000,
  }, async (t) => {
    const s = await setUp(t, backend);
    await s.apply(s.pod, configA);
    if (s.iptablesBackend === undefined) {
      const script =
        'add chain inet istio-proxy-nat istio-test\nadd rule inet istio-proxy-nat output jump istio-test\nadd table inet istio-proxy-test\n';
      await s.runner.run(['nft', '-f', '-'], { netns: s.pod, stdin: script });
    } else {
      const iptables = s.iptablesBackend.binaries.ipv4.iptables;
      await s.runner.run([iptables, '-t', 'nat', '-N', 'ISTIO_TEST'], { netns: s.pod });
      await s.runner.run([iptables, '-t', 'nat', '-I', 'OUTPUT', '1', '-j', 'ISTIO_TEST'], { netns: s.pod });
    }
    const result = await s.apply(s.pod, configB, true);
    assert.deepEqual(result.outcome, backend.rules === 'nft' ? 'reconciled' : { ipv4: 'reconciled', ipv6: 'reconciled' });
    assert.deepEqual(await s.verify(s.pod, configB), []);
    const after = await s.snapshot();
    assert.doesNotMatch(after, /ISTIO_TEST|istio-test/);

    const fresh = createPodNetworkFixture(t).pod.path;
    await s.apply(fresh, configB);
    assert.equal(after, await snapshot(s.runner, s.iptablesBackend, fresh), 'the reconciled netns equals a fresh apply of the new config');
  });

  test(`[${backend.name}] verify lists what is missing in an untouched netns`, { skip: kernelSkip, timeout: 60_000 }, async (t) => {
    const s = await setUp(t, backend);
    const differences = await s.verify(s.pod, configA);
    assert.ok(differences.length > 0);
    assert.match(
      differences.join('\n'),
      backend.rules === 'nft' ? /missing table inet istio-proxy-nat/ : /ipv4 nat: missing chain ISTIO_OUTPUT/,
    );
  });
}
