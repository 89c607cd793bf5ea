import { AMBIENT, hex } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import { ambientRedirectDns } from './ambientPodOverrides.ts';
import type { AmbientPodOverrides } from './ambientPodOverrides.ts';
import type { NftRule, NftTable } from './nftRule.ts';
import { parseInterfaceName } from './parseAnnotationValues.ts';

const NAT: NftTable = 'istio-ambient-nat';
const MANGLE: NftTable = 'istio-ambient-mangle';
const RAW: NftTable = 'istio-ambient-raw';
const PREROUTING = 'prerouting';
const OUTPUT = 'output';
const ISTIO_PREROUTING = 'istio-prerouting';
const ISTIO_OUTPUT = 'istio-output';
const COUNTER = 'counter';

/**
 * The in-pod nftables rules for an ambient pod (upstream `cni/pkg/nftables`), in upstream creation order; one `inet`
 * list with each IPv6 rule right after its IPv4 twin (only when IPv6 is enabled). Render with
 * `renderAmbientPodNftTransaction`.
 *
 * Fragments are upstream's verbatim, including two with a trailing space (`mark and 0xfff ` in
 * the IPv4 inbound redirect, `| ` in the connmark rule): the reference transactions carry the
 * resulting double spaces, and nft's parser ignores them.
 */
export function buildAmbientPodNftRules(config: AmbientConfig, overrides: AmbientPodOverrides): NftRule[] {
  const rules: NftRule[] = [];
  const add = (table: NftTable, chain: string, ...args: string[]): void => {
    rules.push({ table, chain, args });
  };
  const addV6 = (table: NftTable, chain: string, ...args: string[]): void => {
    if (config.enableIPv6) add(table, chain, ...args);
  };
  const dns = ambientRedirectDns(config, overrides);
  const mark = hex(AMBIENT.inpodMark);
  const mask = hex(AMBIENT.inpodMask);
  const tproxyMark = hex(AMBIENT.inpodTproxyMark);
  const tproxyMask = hex(AMBIENT.inpodTproxyMask);
  const snat4 = config.hostProbeSnatAddress.address;
  const snat6 = config.hostProbeV6SnatAddress.address;
  const to = (port: number): string => `:${port}`;

  add(MANGLE, PREROUTING, 'jump', ISTIO_PREROUTING);
  add(MANGLE, OUTPUT, 'jump', ISTIO_OUTPUT);
  add(NAT, OUTPUT, 'jump', ISTIO_OUTPUT);
  if (dns) {
    add(RAW, PREROUTING, 'jump', ISTIO_PREROUTING);
    add(RAW, OUTPUT, 'jump', ISTIO_OUTPUT);
  }
  add(NAT, PREROUTING, 'jump', ISTIO_PREROUTING);

  // Re-checked here because overrides may be built by hand; names go unquoted into the script.
  for (const iface of overrides.virtualInterfaces.map(parseInterfaceName)) {
    add(NAT, ISTIO_PREROUTING, 'iifname', iface, 'meta l4proto tcp', COUNTER, 'redirect to', to(AMBIENT.ztunnelOutboundPort));
    add(NAT, ISTIO_PREROUTING, 'iifname', iface, 'meta l4proto tcp', COUNTER, 'return');
  }

  add(MANGLE, ISTIO_PREROUTING, 'meta mark & 0xfff ==', mark, COUNTER, 'ct mark set ct mark & 0xfffff000 | ', tproxyMark);
  if (!overrides.ingressMode) {
    add(NAT, ISTIO_PREROUTING, 'meta l4proto tcp', 'ip saddr', snat4, COUNTER, 'accept');
    addV6(NAT, ISTIO_PREROUTING, 'meta l4proto tcp', 'ip6 saddr', snat6, COUNTER, 'accept');
  }
  add(NAT, ISTIO_OUTPUT, 'meta l4proto tcp', 'ip daddr', snat4, COUNTER, 'accept');
  addV6(NAT, ISTIO_OUTPUT, 'meta l4proto tcp', 'ip6 daddr', snat6, COUNTER, 'accept');
  if (!overrides.ingressMode) {
    const inbound = String(AMBIENT.ztunnelInboundPort);
    add(
      NAT,
      ISTIO_PREROUTING,
      'ip daddr',
      '!=',
      '127.0.0.1/32',
      'tcp dport',
      '!=',
      inbound,
      `mark and ${mask} `,
      '!=',
      mark,
      COUNTER,
      'redirect to',
      to(AMBIENT.ztunnelInboundPlaintextPort),
    );
    addV6(
      NAT,
      ISTIO_PREROUTING,
      'ip6 daddr',
      '!=',
      '::1/128',
      'tcp dport',
      '!=',
      inbound,
      `mark and ${mask}`,
      '!=',
      mark,
      COUNTER,
      'redirect to',
      to(AMBIENT.ztunnelInboundPlaintextPort),
    );
  }
  add(MANGLE, ISTIO_OUTPUT, 'ct mark and', tproxyMask, '==', tproxyMark, COUNTER, 'meta mark set ct mark');
  if (dns) {
    const dnsPort = to(AMBIENT.dnsCapturePort);
    add(NAT, ISTIO_OUTPUT, 'oifname', '!=', 'lo', 'mark and', mask, '!=', mark, 'udp dport', '53', COUNTER, 'redirect to', dnsPort);
    add(
      NAT,
      ISTIO_OUTPUT,
      'ip daddr',
      '!=',
      '127.0.0.1/32',
      'tcp dport',
      '53',
      'mark and',
      mask,
      '!=',
      mark,
      COUNTER,
      'redirect to',
      dnsPort,
    );
    addV6(
      NAT,
      ISTIO_OUTPUT,
      'ip6 daddr',
      '!=',
      '::1/128',
      'tcp dport',
      '53',
      'mark and',
      mask,
      '!=',
      mark,
      COUNTER,
      'redirect to',
      dnsPort,
    );
    // Own conntrack zone for proxy <-> upstream DNS, so their ports cannot collide (as upstream `cni/pkg/iptables/iptables.go`).
    add(RAW, ISTIO_OUTPUT, 'udp dport', '53', 'meta mark and', mask, '==', mark, COUNTER, 'ct zone set', '1');
    add(RAW, ISTIO_PREROUTING, 'udp sport', '53', 'meta mark and', mask, '!=', mark, COUNTER, 'ct zone set', '1');
  }
  add(NAT, ISTIO_OUTPUT, 'meta l4proto tcp', 'mark and', tproxyMask, '==', tproxyMark, COUNTER, 'accept');
  // An app calling its own pod IP goes over lo; do not loop it through ztunnel.
  add(NAT, ISTIO_OUTPUT, 'oifname', 'lo', 'ip daddr', '!=', '127.0.0.1/32', COUNTER, 'accept');
  addV6(NAT, ISTIO_OUTPUT, 'oifname', 'lo', 'ip6 daddr', '!=', '::1/128', COUNTER, 'accept');
  add(
    NAT,
    ISTIO_OUTPUT,
    'meta l4proto tcp',
    'ip daddr',
    '!=',
    '127.0.0.1/32',
    'mark and',
    mask,
    '!=',
    mark,
    COUNTER,
    'redirect to',
    to(AMBIENT.ztunnelOutboundPort),
  );
  addV6(
    NAT,
    ISTIO_OUTPUT,
    'meta l4proto tcp',
    'ip6 daddr',
    '!=',
    '::1/128',
    'mark and',
    mask,
    '!=',
    mark,
    COUNTER,
    'redirect to',
    to(AMBIENT.ztunnelOutboundPort),
  );
  return rules;
}
