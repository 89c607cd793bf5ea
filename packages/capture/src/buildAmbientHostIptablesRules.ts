import { AMBIENT_CHAIN, ambientProbeSetName } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import type { IpFamily } from '@istio-cni/cni';
import type { IptablesRule, IptablesRuleSet } from './iptablesRule.ts';

const POSTRT = AMBIENT_CHAIN.hostPostrouting;

function familyRules(config: AmbientConfig, family: IpFamily): IptablesRule[] {
  const snat = (family === 4 ? config.hostProbeSnatAddress : config.hostProbeV6SnatAddress).address;
  return [
    { table: 'nat', chain: 'POSTROUTING', position: 1, args: ['-j', POSTRT] },
    // `--socket-exists`: the packet left a local socket (kubelet), not forwarded node traffic
    // (kube-proxy), which must stay captured.
    {
      table: 'nat',
      chain: POSTRT,
      args: [
        '-m',
        'owner',
        '--socket-exists',
        '-p',
        'tcp',
        '-m',
        'set',
        '--match-set',
        ambientProbeSetName(family),
        'dst',
        '-j',
        'SNAT',
        '--to-source',
        snat,
      ],
    },
  ];
}

/**
 * Host-netns rules that SNAT kubelet probes to enrolled pods (upstream `cni/pkg/iptables/iptables.go`), per family; `v6` is
 * empty unless IPv6 is enabled. Render each list with `renderIptablesRestore`.
 */
export function buildAmbientHostIptablesRules(config: AmbientConfig): IptablesRuleSet {
  return { v4: familyRules(config, 4), v6: config.enableIPv6 ? familyRules(config, 6) : [] };
}
