/**
 * The daemon's code besides the installer, in one module that `daemon.ts` loads only after the
 * installer's first pass has started (its plugin copy runs meanwhile).
 */
export { parseEnablementSelectors } from '@istio-cni/capture';
import { checkNftCapabilities, createExecCommandRunner } from '@istio-cni/dataplane';

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

/** NATIVE_NFTABLES: the node's nft must do what this agent asks of it (`checkNftCapabilities`). */
export function checkNativeNftables(): Promise<void> {
  return checkNftCapabilities(createExecCommandRunner());
}
