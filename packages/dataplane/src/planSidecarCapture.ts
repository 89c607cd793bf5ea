import {
  buildSidecarIptablesRules,
  buildSidecarNftRules,
  captureConfigFromRedirect,
  redirectFromPod,
  renderIptablesRestore,
  renderNftTransaction,
  type CaptureEnvironment,
  type Pod,
} from '@istio-cni/capture';
import type { ApplySidecarCaptureOptions, SidecarRulePlan } from './applySidecarCapture.ts';

export interface PlanSidecarCaptureOptions {
  netns: string;
  nativeNftables: boolean;
  /** ISTIO_OUTBOUND_* variables of the process that programs the rules. */
  env?: CaptureEnvironment;
  forceIptablesBinary?: string;
}

/**
 * Everything needed to capture a sidecar pod's traffic, derived from the pod alone (upstream `sidecar_redirect.go`):
 * validation happens here, so an invalid annotation throws an `AnnotationError` before any command
 * runs. The agent and the plugin's degraded mode both call this, so they program identical rules.
 */
export function planSidecarCapture(pod: Pod, options: PlanSidecarCaptureOptions): ApplySidecarCaptureOptions {
  const redirect = redirectFromPod(pod);
  // Validate the environment-derived parts now too, with the IPv6 answer still unknown.
  captureConfigFromRedirect(redirect, options.env);
  const plan = ({ ipv6 }: { ipv6: boolean }): SidecarRulePlan => {
    const config = captureConfigFromRedirect(redirect, { ...options.env, enableIPv6: ipv6 });
    if (options.nativeNftables) {
      return { backend: 'nft', script: renderNftTransaction(buildSidecarNftRules(config)) };
    }
    const rules = buildSidecarIptablesRules(config);
    return {
      backend: 'iptables',
      documents: {
        ipv4: renderIptablesRestore(rules.v4),
        ...(ipv6 ? { ipv6: renderIptablesRestore(rules.v6) } : {}),
      },
    };
  };
  const inboundCaptured = redirect.includeInboundPorts === '*' || redirect.includeInboundPorts.length > 0;
  return {
    netns: options.netns,
    plan,
    tproxyRoutes: redirect.interceptionMode === 'TPROXY' && inboundCaptured,
    dualStack: redirect.dualStack,
    ...(options.forceIptablesBinary ? { forceIptablesBinary: options.forceIptablesBinary } : {}),
  };
}
