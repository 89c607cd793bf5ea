import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RecordedCall } from '@istio-cni/dataplane';
import { dryRunDocuments, runCommand } from './istioIptablesHarness.ts';

const NETNS = '/var/run/netns/test-pod';
const V4_ADDRS = JSON.stringify([
  { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] },
  { ifname: 'eth0', addr_info: [{ family: 'inet', local: '10.0.0.5', scope: 'global' }] },
]);

/** A stand-in for an empty pod netns with iptables-nft 1.8.9 and nft installed. */
function emptyNetns(call: RecordedCall): { stdout: string; stderr: string } | Error | undefined {
  const argv = call.argv.join(' ');
  if (argv === 'ip -j addr show') return { stdout: V4_ADDRS, stderr: '' };
  if (argv.endsWith('-save --version')) return { stdout: 'iptables-save v1.8.9 (nf_tables)\n', stderr: '' };
  return undefined;
}

const deps = { checkNetns: async () => {}, respond: emptyNetns };

function argvs(calls: readonly RecordedCall[]): string[] {
  return calls.map((c) => c.argv.join(' '));
}

test('applies the iptables documents it would print, with iptables-restore --noflush inside the netns', async () => {
  const args = ['-b', '*', '-i', '*', '-d', '15020,15021,15090', '--netns', NETNS, '--iptables-version', 'nft'];
  const dry = await runCommand([...args, '--dry-run'], { ...deps, env: { ENABLE_INBOUND_IPV6: 'false' } });
  assert.equal(dry.exitCode, 0, dry.stderr);
  const run = await runCommand(args, deps);
  assert.equal(run.exitCode, 0, run.stderr);
  assert.equal(run.stdout, '', 'applying prints no documents');
  assert.deepEqual(argvs(run.runner.calls), [
    'ip -j addr show',
    'iptables-nft-save --version',
    'unshare --net -- iptables-nft -t nat -A INPUT -p 255 -j RETURN',
    // One nat-only document into a fresh netns: the restore refuses existing chains, no save first.
    'iptables-nft-restore --noflush',
  ]);
  const netnsCalls = run.runner.calls.filter((c) => c.options.netns !== undefined);
  assert.deepEqual(
    netnsCalls.map((c) => c.options.netns),
    [NETNS, NETNS],
    'probe and restore run in the netns',
  );
  const restore = run.runner.calls.at(-1);
  assert.equal(restore?.options.stdin, dryRunDocuments(dry.stdout));
  assert.match(run.stderr, /sidecar capture rules in place/);
  assert.match(run.stderr, /ipv4 applied/);
});

test('IPv6 pods get the ip6tables document; TPROXY adds policy routes with the given mark and table', async () => {
  const run = await runCommand(['-m', 'TPROXY', '-b', '*', '-t', '1400', '-r', '150', '--netns', NETNS, '--iptables-version', 'nft'], {
    ...deps,
    env: { ENABLE_INBOUND_IPV6: 'true' },
  });
  assert.equal(run.exitCode, 0, run.stderr);
  const lines = argvs(run.runner.calls);
  assert.ok(lines.includes('ip6tables-nft-restore --noflush'), lines.join('\n'));
  assert.ok(!lines.includes('ip -j addr show'), 'ENABLE_INBOUND_IPV6 skips detection');
  for (const family of ['-4', '-6']) {
    assert.ok(lines.includes(`ip ${family} rule add fwmark 1400 lookup 150`), lines.join('\n'));
    assert.ok(
      lines.some((l) => l.startsWith(`ip ${family} route `) && l.endsWith('local default dev lo table 150')),
      lines.join('\n'),
    );
  }
  assert.ok(
    lines.some((l) => l.includes('::6/128 dev lo')),
    'the IPv6 passthrough source address is added',
  );
  const v4 = run.runner.calls.find((c) => c.argv.join(' ') === 'iptables-nft-restore --noflush');
  assert.match(v4?.options.stdin ?? '', /--tproxy-mark 1400\/0xffffffff --on-port 15006/);
});

test('--native-nftables applies the transaction with one nft -f - in the netns', async () => {
  const args = ['-b', '8080', '--netns', NETNS, '--native-nftables'];
  const dry = await runCommand([...args, '-n'], { ...deps, env: { ENABLE_INBOUND_IPV6: 'false' } });
  const run = await runCommand(args, { ...deps, env: { ENABLE_INBOUND_IPV6: 'false' } });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.deepEqual(argvs(run.runner.calls), ['nft -j list chains', 'nft list chains', 'nft -f -']);
  assert.equal(run.runner.calls[2]?.options.netns, NETNS);
  assert.equal(run.runner.calls[2]?.options.stdin, dryRunDocuments(dry.stdout));
});

test('--skip-rule-apply runs nothing', async () => {
  const run = await runCommand(['--skip-rule-apply', '--netns', NETNS], deps);
  assert.equal(run.exitCode, 0, run.stderr);
  assert.deepEqual(run.runner.calls, []);
});

test('a failing restore exits 1 with the command and its error, without a usage hint', async () => {
  const run = await runCommand(['--netns', NETNS, '--iptables-version', 'nft'], {
    ...deps,
    respond: (call) => (call.argv[0] === 'iptables-nft-restore' ? new Error('iptables-nft-restore: line 3 failed') : emptyNetns(call)),
  });
  assert.equal(run.exitCode, 1);
  assert.match(run.stderr, /failed to set up sidecar capture: iptables-nft-restore: line 3 failed/);
  assert.doesNotMatch(run.stderr, /--help/);
});

test('--log_output_level none silences the log; debug is accepted', async () => {
  const quiet = await runCommand(['--netns', NETNS, '--iptables-version', 'nft', '--log_output_level', 'default:none'], deps);
  assert.equal(quiet.exitCode, 0);
  assert.equal(quiet.stderr, '');
  const compat = await runCommand(
    ['--netns', NETNS, '--iptables-version', 'nft', '--log_output_level=debug', '--force-apply', '--log_as_json'],
    deps,
  );
  assert.equal(compat.exitCode, 0);
  assert.match(compat.stderr, /--force-apply has no effect here/);
});
