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

/** How many lookups to try, and what to do when none answers (docs/architecture.md "Upgrades"). */
export interface LookupFailurePolicy {
  attempts: number;
  keepOnFailure: boolean;
}

/**
 * Ambient: upstream's `ShouldStopCleanup` (keep and retry only with the Istio-owned config).
 * Sidecar mode (ours; upstream always cleans up): retry, then keep. A kept plugin whose agent is gone
 * still decides every pod through degraded mode (captured, or refused when the pod cannot be read);
 * a removed one lets sidecar pods start uncaptured. An uninstall answers 404, or 401/403 once its
 * RBAC or service account is gone, which `decideFromState` turns into a clean-up, not a failure.
 */
export function lookupFailurePolicy(ambientEnabled: boolean, ownedConfig: boolean): LookupFailurePolicy {
  if (ambientEnabled) return { attempts: ownedConfig ? 3 : 1, keepOnFailure: ownedConfig };
  return { attempts: 3, keepOnFailure: true };
}

/**
 * Whether shutdown is an upgrade or reboot, so the plugin, its config and kubeconfig must stay
 * (upstream `ShouldStopCleanup`): the DaemonSet still exists, is not being deleted and still targets this node.
 * In both modes; never with AMBIENT_DISABLE_SAFE_UPGRADE.
 */
export async function shouldKeepOnShutdown(o: UpgradeDecisionOptions): Promise<boolean> {
  if (o.disableSafeUpgrade) return false;
  const policy = lookupFailurePolicy(o.ambientEnabled, o.ownedConfig);
  if (!o.lookup) {
    // Without API access nothing can ever tell an uninstall apart; sidecar mode cleans up as upstream.
    const keep = o.ambientEnabled && policy.keepOnFailure;
    o.logger?.warn('no Kubernetes API access for the upgrade check; using the default', { keep });
    return keep;
  }
  const lookup = o.lookup;
  const delay = o.retryDelayMs ?? 1000;
  try {
    const keep = await retryWithBackoff(async () => decideFromState(await lookup.lookup()), {
      policy: { initialMs: delay, maxMs: delay },
      maxAttempts: policy.attempts,
      classify: () => ({ retry: true }),
      onRetry: (err, attempt) => o.logger?.warn('DaemonSet lookup failed', { attempt, error: errorMessage(err) }),
    });
    o.logger?.info('upgrade check', { keep });
    return keep;
  } catch (err) {
    o.logger?.warn('DaemonSet lookup failed; using the default', { error: errorMessage(err), keep: policy.keepOnFailure });
    return policy.keepOnFailure;
  }
}
