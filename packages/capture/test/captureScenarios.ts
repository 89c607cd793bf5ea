import { DEFAULT_CAPTURE_CONFIG, parsePort } from '@istio-cni/capture';
import type { CaptureConfig } from '@istio-cni/capture';
import { parseCidr, parseIpAddress, type Cidr, type IpAddress } from '@istio-cni/cni';

/** Upstream `config.Split` semantics for test inputs: empty items (trailing commas) are dropped. */
function items(list: string): string[] {
  return list.split(',').filter((s) => s !== '');
}
const ports = (list: string): number[] => items(list).map(parsePort);
const cidrs = (list: string): Cidr[] => items(list).map((s) => parseCidr(s));
const ips = (list: string): IpAddress[] => items(list).map((s) => parseIpAddress(s));
const ids = (list: string): number[] => items(list).map(Number);

export interface CaptureScenario {
  readonly name: string;
  readonly config: CaptureConfig;
  /** Only the nftables testdata has this case. */
  readonly nftOnly?: boolean;
}

function scenario(name: string, overrides: Partial<CaptureConfig>, nftOnly = false): CaptureScenario {
  return { name, config: { ...DEFAULT_CAPTURE_CONFIG, ...overrides }, nftOnly };
}

/**
 * The istio-iptables / istio-nftables `run_test.go` case table (testdata/upstream/inputs.md §1.4, §1.5, §2.1): the same
 * names and inputs pin both backends.
 */
export const CAPTURE_SCENARIOS: readonly CaptureScenario[] = [
  scenario('ipv6-empty-inbound-ports', { inboundPortsInclude: [], enableIPv6: true }),
  scenario('ip-range', {
    outboundIPRangesExclude: cidrs('1.1.0.0/16'),
    outboundIPRangesInclude: cidrs('9.9.0.0/16'),
    redirectDns: true,
    enableIPv6: false,
    proxyGid: ids('1,2'),
    proxyUid: ids('3,4'),
    dnsServersV4: ips('127.0.0.53'),
  }),
  scenario('tproxy', {
    inboundInterceptionMode: 'TPROXY',
    inboundPortsInclude: '*',
    outboundIPRangesExclude: cidrs('1.1.0.0/16'),
    outboundIPRangesInclude: cidrs('9.9.0.0/16'),
    redirectDns: true,
    dnsServersV4: ips('127.0.0.53'),
    proxyGid: ids('1337'),
    proxyUid: ids('1337'),
    excludeInterfaces: ['not-istio-nic'],
    enableIPv6: true,
  }),
  scenario('ipv6-inbound-ports', { inboundPortsInclude: ports('4000,5000'), enableIPv6: true }),
  scenario('ipv6-virt-interfaces', {
    inboundPortsInclude: ports('4000,5000'),
    rerouteVirtualInterfaces: ['eth0', 'eth1'],
    enableIPv6: true,
  }),
  scenario('ipv6-ipnets', {
    inboundPortsInclude: ports('4000,5000'),
    inboundPortsExclude: ports('6000,7000,'),
    rerouteVirtualInterfaces: ['eth0', 'eth1'],
    outboundIPRangesExclude: cidrs('2001:db8::/32'),
    outboundIPRangesInclude: cidrs('2001:db8::/32'),
    enableIPv6: true,
  }),
  scenario('ipv6-uid-gid', {
    inboundPortsInclude: ports('4000,5000'),
    inboundPortsExclude: ports('6000,7000'),
    rerouteVirtualInterfaces: ['eth0', 'eth1'],
    proxyGid: ids('1,2'),
    proxyUid: ids('3,4'),
    enableIPv6: true,
    outboundIPRangesExclude: cidrs('2001:db8::/32'),
    outboundIPRangesInclude: cidrs('2001:db8::/32'),
  }),
  scenario('ipv6-outbound-ports', { inboundPortsInclude: [], outboundPortsInclude: ports('32000,31000'), enableIPv6: true }),
  scenario('empty', {}),
  scenario('kube-virt-interfaces', { rerouteVirtualInterfaces: ['eth1', 'eth2'], outboundIPRangesInclude: '*' }),
  scenario('ipnets', { outboundIPRangesInclude: cidrs('10.0.0.0/8') }),
  scenario('ipnets-with-kube-virt-interfaces', {
    rerouteVirtualInterfaces: ['eth1', 'eth2'],
    outboundIPRangesInclude: cidrs('10.0.0.0/8'),
  }),
  scenario('inbound-ports-include', { inboundPortsInclude: ports('32000,31000') }),
  scenario('inbound-ports-wildcard', { inboundPortsInclude: '*' }),
  scenario('inbound-ports-tproxy', { inboundPortsInclude: ports('32000,31000'), inboundInterceptionMode: 'TPROXY' }),
  scenario('inbound-ports-wildcard-tproxy', { inboundPortsInclude: '*', inboundInterceptionMode: 'TPROXY' }),
  scenario('inbound-ports-empty-tproxy', { inboundPortsInclude: [], inboundInterceptionMode: 'TPROXY' }, true),
  scenario('dns-uid-gid', {
    redirectDns: true,
    dnsServersV4: ips('127.0.0.53'),
    dnsServersV6: ips('::127.0.0.53'),
    proxyGid: ids('1,2'),
    proxyUid: ids('3,4'),
    enableIPv6: true,
  }),
  scenario('ipv6-dns-uid-gid', { enableIPv6: true, redirectDns: true, proxyGid: ids('1,2'), proxyUid: ids('3,4') }),
  scenario('outbound-owner-groups', { ownerGroupsInclude: ['java', '202'] }),
  scenario('outbound-owner-groups-exclude', { ownerGroupsExclude: ['888', 'ftp'] }),
  scenario('ipv6-dns-outbound-owner-groups', { enableIPv6: true, redirectDns: true, ownerGroupsInclude: ['java', '202'] }),
  scenario('ipv6-dns-outbound-owner-groups-exclude', { enableIPv6: true, redirectDns: true, ownerGroupsExclude: ['888', 'ftp'] }),
  scenario('outbound-ports-include', { outboundPortsInclude: ports('32000,31000') }),
  scenario('loopback-outbound-iprange', {
    outboundIPRangesInclude: cidrs('127.1.2.3/32'),
    redirectDns: true,
    dnsServersV4: ips('127.0.0.53'),
    enableIPv6: false,
    proxyGid: ids('1,2'),
    proxyUid: ids('3,4'),
  }),
  scenario('basic-exclude-nic', { excludeInterfaces: ['not-istio-nic'] }),
  scenario('drop-invalid', { dropInvalid: true }),
  scenario('host-ipv4-loopback-cidr', { hostIPv4LoopbackCidr: parseCidr('127.0.0.1/8') }),
];
