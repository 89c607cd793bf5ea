import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  buildSidecarIptablesRules,
  buildSidecarNftRules,
  DEFAULT_CAPTURE_CONFIG,
  renderIptablesRestore,
  renderNftTransaction,
} from '@istio-cni/capture';
import type { CaptureConfig } from '@istio-cni/capture';
import { parseCidr, parseIpAddress } from '@istio-cni/cni';
import { dryRunDocuments, goldenRestoreText, readIptablesGolden, readNftGolden, runCommand, trimmed } from './istioIptablesHarness.ts';

interface GoldenCase {
  readonly name: string;
  /** istio-iptables flags giving the case's config (testdata/upstream/inputs.md §1.5). */
  readonly args: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  readonly ipv6?: boolean;
  /** resolv.conf content, when the case has DNS servers. */
  readonly resolvConf?: string;
  readonly nftOnly?: boolean;
}

const DNS_V4 = 'nameserver 127.0.0.53\n';
const DNS_V4_V6 = 'nameserver 127.0.0.53\nnameserver ::127.0.0.53\n';

/** Every istio-iptables / istio-nftables golden case, expressed as command-line input. */
const CASES: readonly GoldenCase[] = [
  { name: 'ipv6-empty-inbound-ports', args: [], ipv6: true },
  { name: 'ip-range', args: ['-x', '1.1.0.0/16', '-i', '9.9.0.0/16', '--redirect-dns', '-g', '1,2', '-u', '3,4'], resolvConf: DNS_V4 },
  {
    name: 'tproxy',
    args: [
      '-m',
      'TPROXY',
      '-b',
      '*',
      '-x',
      '1.1.0.0/16',
      '-i',
      '9.9.0.0/16',
      '--redirect-dns',
      '-g',
      '1337',
      '-u',
      '1337',
      '-c',
      'not-istio-nic',
    ],
    resolvConf: DNS_V4,
    ipv6: true,
  },
  { name: 'ipv6-inbound-ports', args: ['-b', '4000,5000'], ipv6: true },
  { name: 'ipv6-virt-interfaces', args: ['-b', '4000,5000', '-k', 'eth0,eth1'], ipv6: true },
  {
    name: 'ipv6-ipnets',
    args: ['-b', '4000,5000', '-d', '6000,7000,', '-k', 'eth0,eth1', '-x', '2001:db8::/32', '-i', '2001:db8::/32'],
    ipv6: true,
  },
  {
    name: 'ipv6-uid-gid',
    args: ['-b', '4000,5000', '-d', '6000,7000', '-k', 'eth0,eth1', '-g', '1,2', '-u', '3,4', '-x', '2001:db8::/32', '-i', '2001:db8::/32'],
    ipv6: true,
  },
  { name: 'ipv6-outbound-ports', args: ['-q', '32000,31000'], ipv6: true },
  { name: 'empty', args: [] },
  { name: 'kube-virt-interfaces', args: ['-k', 'eth1,eth2', '-i', '*'] },
  { name: 'ipnets', args: ['-i', '10.0.0.0/8'] },
  { name: 'ipnets-with-kube-virt-interfaces', args: ['--reroute-virtual-interfaces', 'eth1,eth2', '-i', '10.0.0.0/8'] },
  { name: 'inbound-ports-include', args: ['-b', '32000,31000'] },
  { name: 'inbound-ports-wildcard', args: ['-b', '*'] },
  { name: 'inbound-ports-tproxy', args: ['-b', '32000,31000', '-m', 'TPROXY'] },
  { name: 'inbound-ports-wildcard-tproxy', args: ['--istio-inbound-ports=*', '--istio-inbound-interception-mode=TPROXY'] },
  { name: 'inbound-ports-empty-tproxy', args: ['-m', 'TPROXY'], nftOnly: true },
  { name: 'dns-uid-gid', args: ['--redirect-dns', '-g', '1,2', '-u', '3,4'], resolvConf: DNS_V4_V6, ipv6: true },
  { name: 'ipv6-dns-uid-gid', args: ['--redirect-dns', '-g', '1,2', '-u', '3,4'], resolvConf: '', ipv6: true },
  { name: 'outbound-owner-groups', args: [], env: { ISTIO_OUTBOUND_OWNER_GROUPS: 'java,202' } },
  { name: 'outbound-owner-groups-exclude', args: [], env: { ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE: '888,ftp' } },
  {
    name: 'ipv6-dns-outbound-owner-groups',
    args: ['--redirect-dns'],
    env: { ISTIO_OUTBOUND_OWNER_GROUPS: 'java,202' },
    resolvConf: '',
    ipv6: true,
  },
  {
    name: 'ipv6-dns-outbound-owner-groups-exclude',
    args: ['--redirect-dns=true'],
    env: { ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE: '888,ftp' },
    resolvConf: '',
    ipv6: true,
  },
  { name: 'outbound-ports-include', args: ['--istio-outbound-ports', '32000,31000'] },
  { name: 'loopback-outbound-iprange', args: ['-i', '127.1.2.3/32', '--redirect-dns', '-g', '1,2', '-u', '3,4'], resolvConf: DNS_V4 },
  { name: 'basic-exclude-nic', args: ['-c', 'not-istio-nic'] },
  { name: 'drop-invalid', args: ['--drop-invalid'] },
  { name: 'host-ipv4-loopback-cidr', args: [], env: { ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: '127.0.0.1/8' } },
];

async function dryRun(c: GoldenCase, extra: readonly string[] = []) {
  const files: Record<string, string> = { '/test/resolv.conf': c.resolvConf ?? '' };
  const result = await runCommand(['--dry-run', '--resolv-conf', '/test/resolv.conf', ...c.args, ...extra], {
    env: { ENABLE_INBOUND_IPV6: c.ipv6 === true ? 'true' : 'false', ...c.env },
    readTextFile: async (path) => {
      const text = files[path];
      if (text === undefined) throw new Error(`ENOENT: ${path}`);
      return text;
    },
  });
  assert.equal(result.exitCode, 0, result.stderr);
  assert.deepEqual(result.runner.calls, [], 'a dry run executes nothing');
  return result;
}

for (const c of CASES.filter((x) => x.nftOnly !== true)) {
  test(`dry-run ${c.name}: prints the istio-iptables golden's restore documents`, async () => {
    const { stdout } = await dryRun(c);
    assert.equal(trimmed(dryRunDocuments(stdout)), trimmed(goldenRestoreText(readIptablesGolden(c.name))));
    assert.ok(stdout.startsWith('# iptables-restore --noflush\n'));
    assert.equal(stdout.includes('# ip6tables-restore --noflush\n'), c.ipv6 === true);
  });
}

for (const c of CASES) {
  test(`dry-run --native-nftables ${c.name}: prints the istio-nftables golden's transaction`, async () => {
    const { stdout } = await dryRun(c, ['--native-nftables']);
    assert.ok(stdout.startsWith('# nft -f -\n'));
    assert.equal(trimmed(dryRunDocuments(stdout)), trimmed(readNftGolden(c.name)));
  });
}

/** The same cases as CaptureConfig values, for a direct comparison with the capture renderers. */
const CONFIGS: Readonly<Record<string, Partial<CaptureConfig>>> = {
  'ip-range': {
    outboundIPRangesExclude: [parseCidr('1.1.0.0/16')],
    outboundIPRangesInclude: [parseCidr('9.9.0.0/16')],
    redirectDns: true,
    proxyGid: [1, 2],
    proxyUid: [3, 4],
    dnsServersV4: [parseIpAddress('127.0.0.53')],
  },
  tproxy: {
    inboundInterceptionMode: 'TPROXY',
    inboundPortsInclude: '*',
    outboundIPRangesExclude: [parseCidr('1.1.0.0/16')],
    outboundIPRangesInclude: [parseCidr('9.9.0.0/16')],
    redirectDns: true,
    dnsServersV4: [parseIpAddress('127.0.0.53')],
    excludeInterfaces: ['not-istio-nic'],
    enableIPv6: true,
  },
  'ipv6-uid-gid': {
    inboundPortsInclude: [4000, 5000],
    inboundPortsExclude: [6000, 7000],
    rerouteVirtualInterfaces: ['eth0', 'eth1'],
    proxyGid: [1, 2],
    proxyUid: [3, 4],
    enableIPv6: true,
    outboundIPRangesExclude: [parseCidr('2001:db8::/32')],
    outboundIPRangesInclude: [parseCidr('2001:db8::/32')],
  },
  'dns-uid-gid': {
    redirectDns: true,
    dnsServersV4: [parseIpAddress('127.0.0.53')],
    dnsServersV6: [parseIpAddress('::127.0.0.53')],
    proxyGid: [1, 2],
    proxyUid: [3, 4],
    enableIPv6: true,
  },
  'outbound-owner-groups': { ownerGroupsInclude: ['java', '202'] },
  'host-ipv4-loopback-cidr': { hostIPv4LoopbackCidr: parseCidr('127.0.0.1/8') },
};

for (const [name, overrides] of Object.entries(CONFIGS)) {
  const c = CASES.find((x) => x.name === name);
  if (c === undefined) throw new Error(`no case ${name}`);
  const config: CaptureConfig = { ...DEFAULT_CAPTURE_CONFIG, ...overrides };
  test(`dry-run ${name}: documents equal the capture renderer's output for the equivalent config`, async () => {
    const rules = buildSidecarIptablesRules(config);
    let expected = `# iptables-restore --noflush\n${renderIptablesRestore(rules.v4)}`;
    if (config.enableIPv6) expected += `# ip6tables-restore --noflush\n${renderIptablesRestore(rules.v6)}`;
    assert.equal((await dryRun(c)).stdout, expected);
    const nft = await dryRun(c, ['--native-nftables']);
    assert.equal(nft.stdout, `# nft -f -\n${renderNftTransaction(buildSidecarNftRules(config))}`);
  });
}

test('flags read their environment variables, and the command line wins over them', async () => {
  const base = CASES.find((x) => x.name === 'ipv6-uid-gid');
  assert.ok(base !== undefined);
  const viaEnv = await runCommand(['-n'], {
    env: {
      ENABLE_INBOUND_IPV6: 'true',
      ISTIO_INBOUND_PORTS: '4000,5000',
      ISTIO_LOCAL_EXCLUDE_PORTS: '6000,7000',
      KUBE_VIRT_INTERFACES: 'eth0,eth1',
      PROXY_GID: '1,2',
      PROXY_UID: '3,4',
      ISTIO_SERVICE_EXCLUDE_CIDR: '2001:db8::/32',
      ISTIO_SERVICE_CIDR: '2001:db8::/32',
    },
  });
  assert.equal(viaEnv.exitCode, 0, viaEnv.stderr);
  assert.equal(trimmed(dryRunDocuments(viaEnv.stdout)), trimmed(goldenRestoreText(readIptablesGolden('ipv6-uid-gid'))));

  const overridden = await runCommand(['-n', '-b', '32000,31000'], {
    env: { ISTIO_INBOUND_PORTS: '1,2', DRY_RUN: 'false', ENABLE_INBOUND_IPV6: '0' },
  });
  assert.equal(overridden.exitCode, 0, overridden.stderr);
  assert.equal(trimmed(dryRunDocuments(overridden.stdout)), trimmed(goldenRestoreText(readIptablesGolden('inbound-ports-include'))));
});

test('ISTIO_META_DNS_CAPTURE, INVALID_DROP and DRY_RUN act like their flags', async () => {
  const run = await runCommand([], {
    env: { DRY_RUN: 'true', ENABLE_INBOUND_IPV6: 'false', INVALID_DROP: 'true', ISTIO_META_DNS_CAPTURE: 'false', REDIRECT_DNS: 'true' },
  });
  assert.equal(run.exitCode, 0, run.stderr);
  // ISTIO_META_DNS_CAPTURE is applied after REDIRECT_DNS upstream, so false wins and no resolv.conf is read.
  assert.equal(trimmed(dryRunDocuments(run.stdout)), trimmed(goldenRestoreText(readIptablesGolden('drop-invalid'))));
});

test('the proxy UID defaults to $ENVOY_USER and the GID to the UID', async () => {
  const run = await runCommand(['-n'], {
    env: { ENABLE_INBOUND_IPV6: 'false', ENVOY_USER: 'envoy' },
    lookupUid: (name) => (name === 'envoy' ? '3' : undefined),
  });
  assert.equal(run.exitCode, 0, run.stderr);
  assert.match(run.stdout, /--uid-owner 3 -j RETURN/);
  assert.match(run.stdout, /--gid-owner 3 -j RETURN/);
  assert.doesNotMatch(run.stdout, /1337/);
});
