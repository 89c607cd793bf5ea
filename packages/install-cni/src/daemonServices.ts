/**
 * The daemon's code besides the installer, in one module that `daemon.ts` loads only after the
 * installer's first pass has started (its plugin copy runs meanwhile).
 */
export { parseEnablementSelectors } from '@istio-cni/capture';
import { ambientProbeSetName } from '@istio-cni/capture';
import { createExecCommandRunner, decideNativeNftables } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import type { Settings } from './settings/settings.ts';

export { trimMallocArenas } from '@istio-cni/dataplane';
export { startHandoffServer } from './agent/handoffServer.ts';
export { noApiHandler } from './agent/noApiHandler.ts';
export { startNodeAgent } from './agent/startNodeAgent.ts';
export { startHealthServer } from './health/healthServer.ts';
export { shouldKeepOnShutdown } from './installer/upgradeSafety.ts';
export { startLogSinkServer } from './logSink/logSinkServer.ts';
export { createMetrics } from './metrics/installMetrics.ts';
export { startMetricsServer } from './metrics/metricsServer.ts';
export { startRepairController } from './repair/startRepairController.ts';
export { startNodeTaintRemover } from './taint/startNodeTaintRemover.ts';

/**
 * NATIVE_NFTABLES as this node can honour it (`decideNativeNftables`): refused when nft is unusable,
 * kept on iptables (logged with the reason) when nft has no JSON output or the iptables backend's
 * probe ipsets are still there. The settings returned are the ones everything else then uses.
 */
export async function settingsForNftables(settings: Settings, logger: Logger): Promise<Settings> {
  if (!settings.nativeNftables) return settings;
  const decision = await decideNativeNftables(createExecCommandRunner(), {
    probeSets: settings.ambientEnabled ? [ambientProbeSetName(4), ...(settings.ambientIpv6 ? [ambientProbeSetName(6)] : [])] : [],
    ...(settings.allowSwitchToHostNs ? { hostNetns: `${settings.hostProcDir}/1/ns/net` } : {}),
  });
  if (decision.nftables) return settings;
  logger.warn('NATIVE_NFTABLES=true, but this node stays on iptables', { reason: decision.reason });
  return { ...settings, nativeNftables: false };
}
