import { retryWithBackoff } from '@istio-cni/kube';
import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';

/** What the API server says about the daemon's DaemonSet (`istio-cni-node` in POD_NAMESPACE). */
export type DaemonSetState =
  | { kind: 'present'; deleting: boolean; targetsThisNode: boolean }
  | { kind: 'not-found' }
  | { kind: 'unauthorized' };

/** Reads the DaemonSet; throws on a transient failure (retried). Backed by the Kubernetes API. */
export interface DaemonSetLookup {
  lookup(signal?: AbortSignal): Promise<DaemonSetState>;
}

export interface UpgradeDecisionOptions {
  ambientEnabled: boolean;
  disableSafeUpgrade: boolean;
  /** Istio-owned CNI config in use: keep by default and try harder (upstream `ShouldStopCleanup`). */
  ownedConfig: boolean;
  lookup: DaemonSetLookup | undefined;
  logger?: Logger;
  retryDelayMs?: number;
}

/** One lookup result → keep (true) or clean up (false). */
export function decideFromState(state: DaemonSetState): boolean {
  if (state.kind !== 'present' || state.deleting) return false;
  return state.targetsThisNode;
}

/**
 * Whether shutdown is an upgrade or reboot, so the plugin, its config and kubeconfig must stay
 * (upstream `ShouldStopCleanup`): the DaemonSet still exists, is not being deleted and still targets this node.
 * Only with ambient on, and never with AMBIENT_DISABLE_SAFE_UPGRADE.
 */
export async function shouldKeepOnShutdown(o: UpgradeDecisionOptions): Promise<boolean> {
  if (!o.ambientEnabled || o.disableSafeUpgrade) return false;
  const fallback = o.ownedConfig;
  if (!o.lookup) {
    o.logger?.warn('no Kubernetes API access for the upgrade check; using the default', { keep: fallback });
    return fallback;
  }
  const lookup = o.lookup;
  const delay = o.retryDelayMs ?? 1000;
  try {
    const keep = await retryWithBackoff(async () => decideFromState(await lookup.lookup()), {
      policy: { initialMs: delay, maxMs: delay },
      maxAttempts: o.ownedConfig ? 3 : 1,
      classify: () => ({ retry: true }),
      onRetry: (err, attempt) => o.logger?.warn('DaemonSet lookup failed', { attempt, error: errorMessage(err) }),
    });
    o.logger?.info('upgrade check', { keep });
    return keep;
  } catch (err) {
    o.logger?.warn('DaemonSet lookup failed', { error: errorMessage(err) });
    return fallback;
  }
}
