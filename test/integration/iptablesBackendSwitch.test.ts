import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test, type TestContext } from 'node:test';
import { ambientConfigFromOptions } from '@istio-cni/capture';
import {
  applyAmbientPodRules,
  createExecCommandRunner,
  createScratchNetnsOpener,
  decideIptablesBackend,
  detectIptablesBackend,
  removeIstioIptablesState,
} from '@istio-cni/dataplane';
import { addNetns, type NamedNetns } from '../support/netns.ts';
import { kernelSkip } from '../support/hostTools.ts';

// Switching from upstream's agent to ours on a live node: upstream's agent left its host rules
// (ISTIO_POSTRT) in iptables-legacy, the running pods' rules are in nft. Our start-up must not
// stack a second copy of anything.

const config = ambientConfigFromOptions({ reconcile: true });

function netns(t: TestContext, prefix: string): NamedNetns {
  const ns = addNetns(prefix);
  t.after(() => ns.remove());
  return ns;
}

function run(ns: NamedNetns, ...argv: string[]): string {
  return execFileSync(ns.exec[0] as string, [...ns.exec.slice(1), ...argv], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
}

function upstreamLeftoversIn(host: NamedNetns): void {
  run(host, 'iptables-legacy', '-t', 'nat', '-N', 'ISTIO_POSTRT');
  run(host, 'iptables-legacy', '-t', 'nat', '-A', 'POSTROUTING', '-j', 'ISTIO_POSTRT');
  run(
    host,
    'iptables-legacy',
    '-t',
    'nat',
    '-A',
    'ISTIO_POSTRT',
    '-p',
    'tcp',
    '-m',
    'owner',
    '--socket-exists',
    '-j',
    'SNAT',
    '--to-source',
    '169.254.7.127',
  );
}

/** The `-A` lines of ISTIO state (chains and jumps into them) that `save` prints in `ns`. */
function istioLines(ns: NamedNetns, save: string): string[] {
  return run(ns, save)
    .split('\n')
    .filter((l) => l.startsWith('-A ') && /ISTIO/.test(l));
}

/** A "host" and a "pod" netns; the pod was enrolled earlier, by us, in nft. Returns the pod's ISTIO lines. */
async function nodeWithNftPod(t: TestContext) {
  const runner = createExecCommandRunner();
  const deps = { runner, openScratchNetns: createScratchNetnsOpener() };
  const host = netns(t, 'swhost');
  const pod = netns(t, 'swpod');
  const nftBackend = await detectIptablesBackend(runner, { forceBinary: 'nft' });
  await applyAmbientPodRules(deps, { netns: pod.path, config, backend: { kind: 'iptables', iptables: nftBackend } });
  const before = istioLines(pod, 'iptables-nft-save');
  assert.ok(before.length > 0);
  return { runner, deps, host, pod, before };
}

test("upstream's legacy leftovers in the host: the node stays on nft, the leftovers go, and a running pod keeps one copy", {
  skip: kernelSkip,
  timeout: 60_000,
}, async (t) => {
  const { runner, deps, host, pod, before } = await nodeWithNftPod(t);
  run(host, 'iptables-nft', '-t', 'filter', '-N', 'KUBE-FIREWALL');
  run(host, 'iptables-nft', '-t', 'filter', '-A', 'INPUT', '-j', 'KUBE-FIREWALL');
  upstreamLeftoversIn(host);

  const decision = await decideIptablesBackend(runner, { netns: host.path });
  assert.equal(decision.backend.flavor, 'nft', decision.reason);
  assert.deepEqual(
    decision.leftovers.map((b) => b.flavor),
    ['legacy'],
  );
  for (const leftover of decision.leftovers) await removeIstioIptablesState(runner, leftover, host.path);
  assert.deepEqual(istioLines(host, 'iptables-legacy-save'), []);
  assert.equal(istioLines(host, 'iptables-nft-save').length, 0, 'foreign nft rules only');
  assert.match(run(host, 'iptables-nft-save'), /-A INPUT -j KUBE-FIREWALL/);

  await applyAmbientPodRules(deps, {
    netns: pod.path,
    config,
    backend: { kind: 'iptables', iptables: decision.backend },
    reconcile: true,
  });
  assert.deepEqual(istioLines(pod, 'iptables-nft-save'), before);
  assert.deepEqual(istioLines(pod, 'iptables-legacy-save'), []);
});

test('on a legacy node, a running pod whose rules are in nft is reconciled in nft, not copied to legacy', {
  skip: kernelSkip,
  timeout: 60_000,
}, async (t) => {
  const { runner, deps, host, pod, before } = await nodeWithNftPod(t);
  run(host, 'iptables-legacy', '-t', 'filter', '-A', 'INPUT', '-p', '255', '-j', 'ACCEPT');

  const decision = await decideIptablesBackend(runner, { netns: host.path });
  assert.equal(decision.backend.flavor, 'legacy', decision.reason);
  const result = await applyAmbientPodRules(deps, {
    netns: pod.path,
    config,
    backend: { kind: 'iptables', iptables: decision.backend },
    reconcile: true,
  });
  assert.equal(result.adopted, 'nft');
  assert.deepEqual(istioLines(pod, 'iptables-nft-save'), before);
  assert.deepEqual(istioLines(pod, 'iptables-legacy-save'), []);

  // A second copy made by an older agent is removed on the next reconciliation.
  const legacyBackend = await detectIptablesBackend(runner, { forceBinary: 'legacy' });
  const copy = await applyAmbientPodRules(deps, {
    netns: pod.path,
    config,
    backend: { kind: 'iptables', iptables: { ...legacyBackend, adoptable: [] } },
  });
  assert.equal(copy.adopted, undefined);
  assert.ok(istioLines(pod, 'iptables-legacy-save').length > 0, 'the old behaviour: a legacy copy next to the nft one');
  const repaired = await applyAmbientPodRules(deps, {
    netns: pod.path,
    config,
    backend: { kind: 'iptables', iptables: decision.backend },
    reconcile: true,
  });
  assert.deepEqual(repaired.removedDuplicates, ['nft']);
  assert.deepEqual(istioLines(pod, 'iptables-nft-save'), []);
  assert.ok(istioLines(pod, 'iptables-legacy-save').length > 0);
});
