import { ambientProbeSetName } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import type { NftRule } from './nftRule.ts';
import { parseOwnerId } from './parseAnnotationValues.ts';

/**
 * The host-netns nftables probe rule (upstream `cni/pkg/nftables`): TCP from the kubelet's UID to an enrolled pod IP
 * is SNATed to the probe address. nft has no `--socket-exists`, so upstream matches the kubelet
 * UID instead. `kubeletUid` is the discovered real UID (a number or its decimal text).
 */
export function buildAmbientHostNftRules(config: AmbientConfig, kubeletUid: number | string): NftRule[] {
  const uid = String(parseOwnerId(String(kubeletUid)));
  const rules: NftRule[] = [
    {
      table: 'istio-ambient-nat',
      chain: 'postrouting',
      args: [
        'meta l4proto tcp',
        'skuid',
        uid,
        'ip',
        'daddr',
        `@${ambientProbeSetName(4)}`,
        'counter',
        'snat',
        'to',
        config.hostProbeSnatAddress.address,
      ],
    },
  ];
  if (config.enableIPv6) {
    rules.push({
      table: 'istio-ambient-nat',
      chain: 'postrouting',
      args: [
        'meta l4proto tcp',
        'skuid',
        uid,
        'ip6',
        'daddr',
        `@${ambientProbeSetName(6)}`,
        'counter',
        'snat',
        'to',
        config.hostProbeV6SnatAddress.address,
      ],
    });
  }
  return rules;
}
