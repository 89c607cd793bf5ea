/**
 * The nf_tables generation shortcut of continuous verification (root, real kernel): the reader
 * sees every nftables commit in a pod netns (iptables-nft or nft) and no read, leaves this thread
 * in its own netns, and `SidecarCaptureManager.inspect` skips only a netns whose generation has not
 * moved since it was last found in place. The same for iptables-legacy with the fingerprint of the
 * netns's legacy tables: it moves with every rule, chain or policy change, not with counters.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readlinkSync } from 'node:fs';
import { test } from 'node:test';
import type { Pod } from '@istio-cni/capture';
import {
  type CommandRunner,
  createExecCommandRunner,
  createLegacyTablesFingerprinter,
  createNftGenerationReader,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
} from '@istio-cni/dataplane';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';

const inNetns = (path: string, argv: string[]) => execFileSync('nsenter', [`--net=${path}`, '--', ...argv], { stdio: 'pipe' });

test('the generation moves with every nftables commit (iptables-nft and nft), not with reads', { skip: kernelSkip }, (t) => {
  const net = createPodNetworkFixture(t);
  const own = readlinkSync('/proc/thread-self/ns/net');
  const reader = createNftGenerationReader();
  const fd = openSync(net.pod.path, 'r');
  t.after(() => closeSync(fd));
  const g0 = reader.read(fd);
  inNetns(net.pod.path, ['iptables-nft-save']);
  inNetns(net.pod.path, ['nft', 'list', 'ruleset']);
  assert.equal(reader.read(fd), g0, 'reads commit nothing');
  inNetns(net.pod.path, ['iptables-nft', '-t', 'nat', '-N', 'ISTIO_GEN']);
  const g1 = reader.read(fd);
  assert.notEqual(g1, g0);
  inNetns(net.pod.path, ['nft', 'add', 'table', 'inet', 'gen-test']);
  assert.notEqual(reader.read(fd), g1);
  assert.equal(readlinkSync('/proc/thread-self/ns/net'), own, 'back in our own netns');
});

test('the legacy tables fingerprint moves with rules, chains and policies, not with counters or reads', { skip: kernelSkip }, (t) => {
  const net = createPodNetworkFixture(t);
  const own = readlinkSync('/proc/thread-self/ns/net');
  const reader = createLegacyTablesFingerprinter();
  const fd = openSync(net.pod.path, 'r');
  t.after(() => closeSync(fd));
  const empty = reader.fingerprint(fd);
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'nat', '-N', 'ISTIO_FP']);
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'nat', '-A', 'OUTPUT', '-p', 'tcp', '-d', '192.0.2.1', '-j', 'ISTIO_FP']);
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'filter', '-A', 'OUTPUT', '-p', 'tcp', '-j', 'ACCEPT']);
  inNetns(net.pod.path, ['ip', 'link', 'set', 'lo', 'up']);
  const f1 = reader.fingerprint(fd);
  assert.notEqual(f1, empty);
  inNetns(net.pod.path, ['iptables-legacy-save']);
  // A refused connection over loopback moves the counters of the filter OUTPUT rule.
  inNetns(net.pod.path, [process.execPath, '-e', "require('node:net').connect(1, '127.0.0.1').on('error', () => {})"]);
  assert.match(
    execFileSync('nsenter', [`--net=${net.pod.path}`, '--', 'iptables-legacy-save', '-c', '-t', 'filter'], { encoding: 'utf8' }),
    /^\[[1-9]\d*:\d+\] -A OUTPUT -p tcp/m,
  );
  assert.equal(reader.fingerprint(fd), f1, 'reads and counters change nothing');
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'nat', '-R', 'OUTPUT', '1', '-p', 'tcp', '-d', '192.0.2.2', '-j', 'ISTIO_FP']);
  const f2 = reader.fingerprint(fd);
  assert.notEqual(f2, f1, 'a rule replaced by one of the same size');
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'mangle', '-P', 'PREROUTING', 'DROP']);
  const f3 = reader.fingerprint(fd);
  assert.notEqual(f3, f2, 'a policy in another table');
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'nat', '-F']);
  assert.notEqual(reader.fingerprint(fd), f3, 'a flush');
  assert.equal(readlinkSync('/proc/thread-self/ns/net'), own, 'back in our own netns');
});

test('the legacy fingerprint of IPv6 tables moves with ip6tables-legacy rules and policies, not with counters', {
  skip: kernelSkip,
}, (t) => {
  const net = createPodNetworkFixture(t);
  const reader = createLegacyTablesFingerprinter();
  const fd = openSync(net.pod.path, 'r');
  t.after(() => closeSync(fd));
  const both = ['ipv4', 'ipv6'] as const;
  const empty = reader.fingerprint(fd, both);
  const v4 = reader.fingerprint(fd);
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'nat', '-N', 'ISTIO_FP6']);
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'nat', '-A', 'OUTPUT', '-p', 'tcp', '-d', '2001:db8::1', '-j', 'ISTIO_FP6']);
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'filter', '-A', 'OUTPUT', '-p', 'tcp', '-j', 'ACCEPT']);
  inNetns(net.pod.path, ['ip', 'link', 'set', 'lo', 'up']);
  const f1 = reader.fingerprint(fd, both);
  assert.notEqual(f1, empty);
  assert.equal(reader.fingerprint(fd), v4, 'the IPv4 fingerprint does not look at IPv6 tables');
  inNetns(net.pod.path, [process.execPath, '-e', "require('node:net').connect(1, '::1').on('error', () => {})"]);
  assert.match(
    execFileSync('nsenter', [`--net=${net.pod.path}`, '--', 'ip6tables-legacy-save', '-c', '-t', 'filter'], { encoding: 'utf8' }),
    /^\[[1-9]\d*:\d+\] -A OUTPUT -p tcp/m,
  );
  assert.equal(reader.fingerprint(fd, both), f1, 'reads and counters change nothing');
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'nat', '-R', 'OUTPUT', '1', '-p', 'tcp', '-d', '2001:db8::2', '-j', 'ISTIO_FP6']);
  const f2 = reader.fingerprint(fd, both);
  assert.notEqual(f2, f1, 'a rule replaced by one of the same size');
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'mangle', '-P', 'PREROUTING', 'DROP']);
  assert.notEqual(reader.fingerprint(fd, both), f2, 'a policy in another table');
});

const pod: Pod = {
  metadata: {
    name: 'gen',
    namespace: 'default',
    uid: 'uid-gen',
    annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' },
  },
  spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }] },
};

/** Counts the commands run, so a skipped inspection shows as none. */
function countingRunner(): CommandRunner & { runs: string[] } {
  const real = createExecCommandRunner();
  const runs: string[] = [];
  return {
    runs,
    run: (argv, options) => {
      runs.push(argv.join(' '));
      return real.run(argv, options);
    },
  };
}

/** A `SidecarCaptureManager` with both shortcuts (generation and legacy fingerprint), as the agent builds it. */
function shortcutManager(runner: CommandRunner, backend: { nativeNftables: boolean; forceIptablesBinary?: string }) {
  return createSidecarCaptureManager({
    runner,
    openScratchNetns: createScratchNetnsOpener(),
    netnsGuard: createPodNetnsGuard({ hostProcDir: '/proc' }),
    nativeNftables: backend.nativeNftables,
    nftGenerations: createNftGenerationReader(),
    legacyFingerprints: createLegacyTablesFingerprinter(),
    ...(backend.forceIptablesBinary ? { forceIptablesBinary: backend.forceIptablesBinary } : {}),
  });
}

for (const backend of [
  {
    name: 'iptables-nft',
    nativeNftables: false,
    forceIptablesBinary: 'nft',
    change: ['iptables-nft', '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT'],
  },
  { name: 'nft', nativeNftables: true, change: ['nft', 'delete', 'table', 'inet', 'istio-proxy-nat'] },
  {
    name: 'iptables-legacy',
    nativeNftables: false,
    forceIptablesBinary: 'legacy',
    change: ['iptables-legacy', '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT'],
  },
]) {
  test(`[${backend.name}] inspect reads a netns again only once its generation moved`, {
    skip: kernelSkip,
    timeout: 60_000,
  }, async (t) => {
    const net = createPodNetworkFixture(t);
    const runner = countingRunner();
    const manager = shortcutManager(runner, backend);
    const ips = [`${net.pod.ipv4}`];
    await manager.apply(pod, net.pod.path, [`${net.pod.ipv4}/24`]);
    assert.deepEqual(await manager.inspect(pod, net.pod.path, ips), [], 'in place, read once');
    const before = runner.runs.length;
    assert.deepEqual(await manager.inspect(pod, net.pod.path, ips), []);
    assert.equal(runner.runs.length, before, 'unchanged generation: nothing run');
    inNetns(net.pod.path, backend.change);
    const drift = await manager.inspect(pod, net.pod.path, ips);
    assert.equal(drift[0]?.kind, 'rules_missing', 'the change is seen');
    assert.ok(runner.runs.length > before);
    await manager.repair(pod, net.pod.path, ips);
    assert.deepEqual(await manager.inspect(pod, net.pod.path, ips), []);
    const afterRepair = runner.runs.length;
    assert.deepEqual(await manager.inspect(pod, net.pod.path, ips), []);
    assert.equal(runner.runs.length, afterRepair, 'in place again: skipped again');
  });
}

test('[iptables-legacy] a pod outside the mesh is read again only once its legacy tables (IPv4 or IPv6) changed', {
  skip: kernelSkip,
  timeout: 60_000,
}, async (t) => {
  const net = createPodNetworkFixture(t);
  const runner = countingRunner();
  const manager = shortcutManager(runner, { nativeNftables: false, forceIptablesBinary: 'legacy' });
  assert.deepEqual(await manager.inspect(undefined, net.pod.path), [], 'nothing of ours, read once');
  const before = runner.runs.length;
  assert.deepEqual(await manager.inspect(undefined, net.pod.path), []);
  assert.equal(runner.runs.length, before, 'unchanged fingerprint: nothing run');
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'nat', '-N', 'ISTIO_OUTPUT']);
  const drift = await manager.inspect(undefined, net.pod.path);
  assert.equal(drift[0]?.kind, 'unexpected_rules', 'an ISTIO_* chain in IPv6 tables is seen');
  inNetns(net.pod.path, ['ip6tables-legacy', '-t', 'nat', '-X', 'ISTIO_OUTPUT']);
  inNetns(net.pod.path, ['iptables-legacy', '-t', 'nat', '-N', 'ISTIO_INBOUND']);
  assert.equal((await manager.inspect(undefined, net.pod.path))[0]?.kind, 'unexpected_rules', 'and one in IPv4 tables');
});
