import {
  buildSidecarIptablesRules,
  buildSidecarNftRules,
  type CaptureConfig,
  DEFAULT_CAPTURE_CONFIG,
  renderIptablesRestore,
  renderNftTransaction,
} from '@istio-cni/capture';
import { parseCidr } from '@istio-cni/cni';
import type { SidecarRulePlan } from '@istio-cni/dataplane';

export type RuleBackend = 'iptables' | 'nft';

/** The capture package's rendering of `cfg` for one backend, in the shape the dataplane applies. */
export function sidecarRulePlan(backend: RuleBackend, cfg: CaptureConfig): SidecarRulePlan {
  if (backend === 'nft') return { backend, script: renderNftTransaction(buildSidecarNftRules(cfg)) };
  const rules = buildSidecarIptablesRules(cfg);
  const documents: { ipv4: string; ipv6?: string } = { ipv4: renderIptablesRestore(rules.v4) };
  if (cfg.enableIPv6) documents.ipv6 = renderIptablesRestore(rules.v6);
  return { backend, documents };
}

export interface TestCaptureOptions {
  mode: 'REDIRECT' | 'TPROXY';
  ipv6: boolean;
  excludeOutboundPorts?: number[];
}

/**
 * A sidecar pod as the plugin would configure it, plus what the traffic tests exercise: capture
 * everything in and out, except inbound port 9002, outbound port 9001 (by default) and the
 * 10.98.0.0/24 + fd00:98::/64 ranges; DNS capture on (ISTIO_META_DNS_CAPTURE).
 */
export function testCaptureConfig(options: TestCaptureOptions): CaptureConfig {
  return {
    ...DEFAULT_CAPTURE_CONFIG,
    inboundInterceptionMode: options.mode,
    inboundPortsInclude: '*',
    inboundPortsExclude: [9002, 15020, 15021, 15090],
    outboundIPRangesInclude: '*',
    outboundIPRangesExclude: [parseCidr('10.98.0.0/24'), parseCidr('fd00:98::/64')],
    outboundPortsExclude: options.excludeOutboundPorts ?? [9001],
    redirectDns: true,
    captureAllDns: true,
    enableIPv6: options.ipv6,
    dualStack: true,
  };
}
