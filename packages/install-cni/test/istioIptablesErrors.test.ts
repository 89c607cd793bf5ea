import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCommand } from './istioIptablesHarness.ts';

interface BadCase {
  readonly args: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  /** Must appear in stderr: the flag or variable and, for a bad value, the value. */
  readonly mentions: readonly string[];
  readonly exitCode?: number;
}

const manyGroups = Array.from({ length: 65 }, (_, i) => `g${i}`).join(',');

/** Every bad-input path: each must exit non-zero with a message naming what was wrong, and run nothing. */
const BAD: readonly BadCase[] = [
  { args: ['--bogus'], mentions: ["unknown option '--bogus'"], exitCode: 1 },
  { args: ['-Z'], mentions: ["unknown option '-Z'"], exitCode: 1 },
  { args: ['-p'], mentions: ['--envoy-port', 'argument missing'], exitCode: 1 },
  { args: ['stray'], mentions: ['too many arguments'], exitCode: 1 },
  { args: ['-p', '70000'], mentions: ['--envoy-port (-p)', '"70000"', 'out of range'] },
  { args: ['-p', '-1'], mentions: ['--envoy-port (-p)', '"-1"'] },
  { args: ['-p', ''], mentions: ['--envoy-port (-p)', '""'] },
  { args: ['--envoy-port=15001 -j ACCEPT'], mentions: ['--envoy-port (-p)', '-j ACCEPT'] },
  { args: ['-z', '99999'], mentions: ['--inbound-capture-port (-z)', '99999'] },
  { args: ['--inbound-tunnel-port', '1.5'], mentions: ['--inbound-tunnel-port (-e)', '1.5'] },
  { args: ['-b', '80,x'], mentions: ['--istio-inbound-ports (-b)', '"80,x"'] },
  { args: ['-b', '80;rm -rf /'], mentions: ['--istio-inbound-ports (-b)', 'rm -rf'] },
  { args: ['-b', '80\n-A OUTPUT -j ACCEPT'], mentions: ['--istio-inbound-ports (-b)', '\\n-A OUTPUT'] },
  { args: ['-b', '*,80'], mentions: ['--istio-inbound-ports (-b)', '*,80'] },
  { args: ['-b', '1'.repeat(10_000)], mentions: ['--istio-inbound-ports (-b)', 'longer than 8192'] },
  { args: ['-b', Array.from({ length: 300 }, () => '80').join(',')], mentions: ['--istio-inbound-ports (-b)', 'more than 256 items'] },
  { args: ['-d', '*'], mentions: ['--istio-local-exclude-ports (-d)', "'*' is not supported"] },
  { args: ['-q', '65536'], mentions: ['--istio-outbound-ports (-q)', '65536'] },
  { args: ['-o', '80,$(id)'], mentions: ['--istio-local-outbound-ports-exclude (-o)', '$(id)'] },
  { args: ['-i', '10.0.0.0/33'], mentions: ['--istio-service-cidr (-i)', '10.0.0.0/33'] },
  { args: ['-i', '10.0.0.1'], mentions: ['--istio-service-cidr (-i)', '10.0.0.1'] },
  { args: ['-i', '010.0.0.0/8'], mentions: ['--istio-service-cidr (-i)', '010.0.0.0/8'] },
  { args: ['-i', '10.0.0.0/8 -j ACCEPT'], mentions: ['--istio-service-cidr (-i)', '-j ACCEPT'] },
  { args: ['-i', 'fe80::1%eth0/64'], mentions: ['--istio-service-cidr (-i)', 'fe80::1%eth0/64'] },
  { args: ['-x', '*'], mentions: ['--istio-service-exclude-cidr (-x)', "'*' is not supported"] },
  { args: ['-x', '::ffff:zz/64'], mentions: ['--istio-service-exclude-cidr (-x)', '::ffff:zz/64'] },
  { args: ['-m', 'tproxy'], mentions: ['--istio-inbound-interception-mode (-m)', '"tproxy"', 'REDIRECT or TPROXY'] },
  { args: ['-m', 'NONE'], mentions: ['--istio-inbound-interception-mode (-m)', 'NONE'] },
  { args: ['-u', 'root'], mentions: ['--proxy-uid (-u)', 'root'] },
  { args: ['-u', ','], mentions: ['--proxy-uid (-u)', 'at least one'] },
  { args: ['-u', '4294967296'], mentions: ['--proxy-uid (-u)', '4294967296'] },
  { args: ['-g', '1337 -j ACCEPT'], mentions: ['--proxy-gid (-g)', '-j ACCEPT'] },
  { args: ['-t', '0'], mentions: ['--istio-inbound-tproxy-mark (-t)', 'must not be 0'] },
  { args: ['-t', '0x10'], mentions: ['--istio-inbound-tproxy-mark (-t)', '0x10'] },
  { args: ['-r', '254'], mentions: ['--istio-inbound-tproxy-route-table (-r)', '254', 'reserved'] },
  { args: ['-r', 'main'], mentions: ['--istio-inbound-tproxy-route-table (-r)', 'main'] },
  { args: ['-k', 'eth0;ls'], mentions: ['--kube-virt-interfaces (-k)', 'eth0;ls'] },
  {
    args: ['--reroute-virtual-interfaces', 'an-interface-name-too-long'],
    mentions: ['--reroute-virtual-interfaces', 'an-interface-name-too-long'],
  },
  {
    args: ['-k', 'eth0', '--reroute-virtual-interfaces', 'eth1'],
    mentions: ['--reroute-virtual-interfaces', 'given together with --kube-virt-interfaces'],
  },
  { args: ['-c', '-j'], mentions: ['--istio-exclude-interfaces (-c)', '"-j"'] },
  { args: ['-c', 'eth 0'], mentions: ['--istio-exclude-interfaces (-c)', 'eth 0'] },
  { args: ['-c', 'eth0,1eth'], mentions: ['--istio-exclude-interfaces (-c)', 'eth0,1eth', 'want a letter first'] },
  { args: ['-c', 'eth0@if3'], mentions: ['--istio-exclude-interfaces (-c)', 'eth0@if3'] },
  { args: ['-k', '_virt'], mentions: ['--kube-virt-interfaces (-k)', '_virt'] },
  { args: ['--redirect-dns=maybe'], mentions: ['--redirect-dns', 'maybe', 'boolean'] },
  { args: ['--dry-run=yes'], mentions: ['--dry-run (-n)', 'yes'] },
  { args: ['--probe-timeout', '5 seconds'], mentions: ['--probe-timeout', '5 seconds'] },
  { args: ['--iptables-probe-port', '70000'], mentions: ['--iptables-probe-port', '70000'] },
  { args: ['--force-iptables-binary', 'auto'], mentions: ['--force-iptables-binary', 'auto', 'legacy'] },
  { args: ['--iptables-version', 'iptables-legacy'], mentions: ['--iptables-version', 'iptables-legacy'] },
  {
    args: ['--native-nftables', '--iptables-version', 'nft'],
    mentions: ['--iptables-version', 'cannot be combined with --native-nftables'],
  },
  { args: ['--log_output_level', 'verbose'], mentions: ['--log_output_level', 'verbose'] },
  { args: ['--log_output_level=default:loud'], mentions: ['--log_output_level', 'default:loud'] },
  { args: ['--run-validation'], mentions: ['--run-validation', 'not supported'] },
  { args: ['--cleanup-only'], mentions: ['--cleanup-only', 'not supported'] },
  { args: ['--netns', '/nonexistent/netns'], mentions: ['--network-namespace', '/nonexistent/netns'] },
  { args: ['--network-namespace', '/etc/hostname'], mentions: ['--network-namespace', '/etc/hostname', 'not a namespace file'] },
  { args: ['--netns', 'a', '--network-namespace', 'b'], mentions: ['given together with'] },
  { args: ['--resolv-conf', ''], mentions: ['--resolv-conf', 'must not be empty'] },
  { args: [], env: { PROXY_UID: 'abc' }, mentions: ['env PROXY_UID', 'abc'] },
  { args: [], env: { ISTIO_INBOUND_PORTS: '80,,x' }, mentions: ['env ISTIO_INBOUND_PORTS', '80,,x'] },
  { args: [], env: { ISTIO_INBOUND_INTERCEPTION_MODE: 'tproxy' }, mentions: ['env ISTIO_INBOUND_INTERCEPTION_MODE', 'tproxy'] },
  { args: [], env: { REDIRECT_DNS: 'nope' }, mentions: ['env REDIRECT_DNS', 'nope'] },
  { args: [], env: { INVALID_DROP: 'sure' }, mentions: ['env INVALID_DROP', 'sure'] },
  { args: [], env: { ISTIO_OUTBOUND_OWNER_GROUPS: 'a b' }, mentions: ['env ISTIO_OUTBOUND_OWNER_GROUPS', 'a b'] },
  { args: [], env: { ISTIO_OUTBOUND_OWNER_GROUPS: manyGroups }, mentions: ['env ISTIO_OUTBOUND_OWNER_GROUPS', 'more than 64 groups'] },
  { args: [], env: { ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE: '$(id)' }, mentions: ['env ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE', '$(id)'] },
  { args: [], env: { ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: '10.0.0.0/8' }, mentions: ['env ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR', 'loopback'] },
  {
    args: [],
    env: { ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: '127.0.0.0/4' },
    mentions: ['env ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR', '127.0.0.0/4'],
  },
  { args: [], env: { ENABLE_INBOUND_IPV6: 'yes' }, mentions: ['env ENABLE_INBOUND_IPV6', 'yes'] },
  { args: [], env: { FORCE_IPTABLES_BINARY: 'auto' }, mentions: ['env FORCE_IPTABLES_BINARY', 'auto'] },
];

for (const c of BAD) {
  const label = [
    ...c.args.map((a) => (a.length > 40 ? `${a.slice(0, 40)}...` : a)),
    ...Object.entries(c.env ?? {}).map(([k, v]) => `${k}=${v.slice(0, 40)}`),
  ].join(' ');
  test(`rejects ${JSON.stringify(label)} with a usage message, applying nothing`, async () => {
    // Not a dry run: a bad value must stop the command before any rule command could run.
    const run = await runCommand(c.args, { env: { ENABLE_INBOUND_IPV6: 'false', ...c.env } });
    assert.equal(run.exitCode, c.exitCode ?? 2, run.stderr);
    for (const text of c.mentions)
      assert.ok(run.stderr.includes(text), `stderr ${JSON.stringify(run.stderr)} lacks ${JSON.stringify(text)}`);
    assert.match(run.stderr, /install-cni istio-iptables --help/);
    assert.equal(run.stdout, '');
    assert.deepEqual(run.runner.calls, []);
  });
}

test('a missing resolv.conf with --redirect-dns fails with exit 1 naming the file, without a usage hint', async () => {
  const run = await runCommand(['-n', '--redirect-dns', '--resolv-conf', '/nonexistent/resolv.conf'], {
    env: { ENABLE_INBOUND_IPV6: 'false' },
  });
  assert.equal(run.exitCode, 1);
  assert.match(run.stderr, /failed to load \/nonexistent\/resolv\.conf/);
  assert.doesNotMatch(run.stderr, /--help/);
  assert.equal(run.stdout, '');
});

test('--capture-all-dns needs no resolv.conf', async () => {
  const run = await runCommand(['-n', '--redirect-dns', '--capture-all-dns', '--resolv-conf', '/nonexistent/resolv.conf'], {
    env: { ENABLE_INBOUND_IPV6: 'false' },
  });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.match(run.stdout, /-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053/);
});

test('a netns without a usable address fails detection with exit 1 and points at ENABLE_INBOUND_IPV6', async () => {
  const onlyLo = JSON.stringify([{ ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] }]);
  const run = await runCommand(['-n'], { respond: () => ({ stdout: onlyLo, stderr: '' }) });
  assert.equal(run.exitCode, 1);
  assert.match(run.stderr, /failed to detect the IP family of the current netns/);
  assert.match(run.stderr, /ENABLE_INBOUND_IPV6/);
});

test('--help lists upstream flags with their environment variables', async () => {
  const run = await runCommand(['--help']);
  assert.equal(run.exitCode, 0);
  for (const text of [
    '-p, --envoy-port <port>',
    '-b, --istio-inbound-ports <ports>',
    'env ISTIO_INBOUND_PORTS',
    '--pod <file>',
    '--netns <path>',
    'REDIRECT_DNS, ISTIO_META_DNS_CAPTURE',
  ]) {
    assert.ok(run.stdout.includes(text), `help lacks ${text}`);
  }
});
