import { AMBIENT, AMBIENT_CHAIN, hex, markMask } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import { ambientRedirectDns } from './ambientPodOverrides.ts';
import type { AmbientPodOverrides } from './ambientPodOverrides.ts';
import type { IpFamily } from '@istio-cni/cni';
import type { IptablesRule, IptablesRuleSet, IptablesTable } from './iptablesRule.ts';
import { parseInterfaceName } from './parseAnnotationValues.ts';

const PRERT = AMBIENT_CHAIN.prerouting;
const OUTPUT = AMBIENT_CHAIN.output;

/** One family's in-pod rule list in upstream creation order (upstream `cni/pkg/iptables/iptables.go`). */
function familyRules(config: AmbientConfig, overrides: AmbientPodOverrides, family: IpFamily): IptablesRule[] {
  const rules: IptablesRule[] = [];
  const add = (table: IptablesTable, chain: string, ...args: string[]): void => {
    rules.push({ table, chain, args });
  };
  const dns = ambientRedirectDns(config, overrides);
  const mark = markMask(AMBIENT.inpodMark, AMBIENT.inpodMask);
  const tproxyMark = markMask(AMBIENT.inpodTproxyMark, AMBIENT.inpodTproxyMask);
  const snat = (family === 4 ? config.hostProbeSnatAddress : config.hostProbeV6SnatAddress).address;
  const localhost = family === 4 ? '127.0.0.1/32' : '::1/128';

  add('mangle', 'PREROUTING', '-j', PRERT);
  add('mangle', 'OUTPUT', '-j', OUTPUT);
  add('nat', 'OUTPUT', '-j', OUTPUT);
  if (dns) {
    add('raw', 'PREROUTING', '-j', PRERT);
    add('raw', 'OUTPUT', '-j', OUTPUT);
  }
  add('nat', 'PREROUTING', '-j', PRERT);

  // Short-circuits first: inbound on a virtual interface is really outbound traffic.
  // Re-checked here because overrides may be built by hand; names go unquoted into the document.
  for (const iface of overrides.virtualInterfaces.map(parseInterfaceName)) {
    add('nat', PRERT, '-i', iface, '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', String(AMBIENT.ztunnelOutboundPort));
    add('nat', PRERT, '-i', iface, '-p', 'tcp', '-j', 'RETURN');
  }

  add('mangle', PRERT, '-m', 'mark', '--mark', mark, '-j', 'CONNMARK', '--set-xmark', tproxyMark);
  if (!overrides.ingressMode) {
    // Kubelet probes arrive SNATed to the probe address by the host rules; they bypass ztunnel.
    add('nat', PRERT, '-s', snat, '-p', 'tcp', '-m', 'tcp', '-j', 'ACCEPT');
  }
  add('nat', OUTPUT, '-d', snat, '-p', 'tcp', '-m', 'tcp', '-j', 'ACCEPT');
  if (!overrides.ingressMode) {
    add(
      'nat',
      PRERT,
      '!',
      '-d',
      localhost,
      '-p',
      'tcp',
      '!',
      '--dport',
      String(AMBIENT.ztunnelInboundPort),
      '-m',
      'mark',
      '!',
      '--mark',
      mark,
      '-j',
      'REDIRECT',
      '--to-ports',
      String(AMBIENT.ztunnelInboundPlaintextPort),
    );
  }
  add(
    'mangle',
    OUTPUT,
    '-m',
    'connmark',
    '--mark',
    tproxyMark,
    '-j',
    'CONNMARK',
    '--restore-mark',
    '--nfmask',
    hex(AMBIENT.inpodRestoreMask),
    '--ctmask',
    hex(AMBIENT.inpodRestoreMask),
  );
  if (dns) {
    add(
      'nat',
      OUTPUT,
      '!',
      '-o',
      'lo',
      '-p',
      'udp',
      '-m',
      'mark',
      '!',
      '--mark',
      mark,
      '-m',
      'udp',
      '--dport',
      '53',
      '-j',
      'REDIRECT',
      '--to-port',
      String(AMBIENT.dnsCapturePort),
    );
    add(
      'nat',
      OUTPUT,
      '!',
      '-d',
      localhost,
      '-p',
      'tcp',
      '--dport',
      '53',
      '-m',
      'mark',
      '!',
      '--mark',
      mark,
      '-j',
      'REDIRECT',
      '--to-ports',
      String(AMBIENT.dnsCapturePort),
    );
    // Own conntrack zone for proxy <-> upstream DNS, so their ports cannot collide (as upstream `cni/pkg/iptables/iptables.go`).
    add('raw', OUTPUT, '-p', 'udp', '-m', 'mark', '--mark', mark, '-m', 'udp', '--dport', '53', '-j', 'CT', '--zone', '1');
    add('raw', PRERT, '-p', 'udp', '-m', 'mark', '!', '--mark', mark, '-m', 'udp', '--sport', '53', '-j', 'CT', '--zone', '1');
  }
  add('nat', OUTPUT, '-p', 'tcp', '-m', 'mark', '--mark', tproxyMark, '-j', 'ACCEPT');
  // An app calling its own pod IP goes over lo; do not loop it through ztunnel.
  add('nat', OUTPUT, '!', '-d', localhost, '-o', 'lo', '-j', 'ACCEPT');
  add(
    'nat',
    OUTPUT,
    '!',
    '-d',
    localhost,
    '-p',
    'tcp',
    '-m',
    'mark',
    '!',
    '--mark',
    mark,
    '-j',
    'REDIRECT',
    '--to-ports',
    String(AMBIENT.ztunnelOutboundPort),
  );
  return rules;
}

/**
 * The in-pod iptables rules for an ambient pod (upstream `cni/pkg/iptables`), per family; `v6` is empty unless IPv6
 * is enabled. Render each list with `renderIptablesRestore` for `iptables-restore --noflush -v`.
 */
export function buildAmbientPodIptablesRules(config: AmbientConfig, overrides: AmbientPodOverrides): IptablesRuleSet {
  return {
    v4: familyRules(config, overrides, 4),
    v6: config.enableIPv6 ? familyRules(config, overrides, 6) : [],
  };
}
