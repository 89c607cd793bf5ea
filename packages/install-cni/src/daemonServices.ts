/**
 * The daemon's code besides the installer, in one module that `daemon.ts` loads only after the
 * installer's first pass has started (its plugin copy runs meanwhile).
 */
export { parseEnablementSelectors } from '@istio-cni/capture';
import { ambientProbeSetName } from '@istio-cni/capture';
import { errorMessage } from '@istio-cni/cni';
import {
  createExecCommandRunner,
  decideNativeNftables,
  holdsNftHostTable,
  NFT_HOST_TABLE,
  type NftablesDecision,
} from '@istio-cni/dataplane';
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
 * probe ipsets are still there. The mirror for a node restarted with it false: while the host netns
 * holds this project's nft host table (`holdsNftHostTable`), the node stays on nftables until a
 * reboot, unless nft can no longer serve it or the iptables probe ipsets are there too (then the
 * setting holds). The settings returned are the ones everything else then uses.
 */
export async function settingsForNftables(settings: Settings, logger: Logger): Promise<Settings> {
  const runner = createExecCommandRunner();
  const hostNetns = settings.allowSwitchToHostNs ? { hostNetns: `${settings.hostProcDir}/1/ns/net` } : {};
  const decide = () =>
    decideNativeNftables(runner, {
      probeSets: settings.ambientEnabled ? [ambientProbeSetName(4), ...(settings.ambientIpv6 ? [ambientProbeSetName(6)] : [])] : [],
      ...hostNetns,
    });
  if (!settings.nativeNftables) {
    if (!settings.ambientEnabled || !(await holdsNftHostTable(runner, hostNetns))) return settings;
    const table = `${NFT_HOST_TABLE.family} ${NFT_HOST_TABLE.name}`;
    const decision = await decide().catch((err: unknown): NftablesDecision => ({ nftables: false, reason: errorMessage(err) }));
    if (!decision.nftables) {
      logger.warn('NATIVE_NFTABLES=false and the nft host table is still on this node, but nftables cannot keep it', {
        table,
        reason: decision.reason,
      });
      return settings;
    }
    logger.warn('NATIVE_NFTABLES=false, but this node stays on nftables', {
      reason: `this agent's nft host table ${table} exists (reboot the node to complete the switch)`,
    });
    return { ...settings, nativeNftables: true };
  }
  const decision = await decide();
  if (decision.nftables) return settings;
  logger.warn('NATIVE_NFTABLES=true, but this node stays on iptables', { reason: decision.reason });
  return { ...settings, nativeNftables: false };
}
