import {
  AnnotationError,
  ambientEnabledFor,
  parseEnablementSelectors,
  sidecarDecision,
  type Namespace,
  type Pod,
} from '@istio-cni/capture';
import { CniError, ErrorCode, type K8sArgs } from '@istio-cni/cni';
import { PodNetnsRefusedError } from '@istio-cni/dataplane/sidecar';
import type { Logger } from '@istio-cni/handoff';
import type { PluginConfig } from '../pluginConfig.ts';
import { ApiUnauthorizedError } from './apiReader.ts';

/** What degraded mode needs from the outside world; the real one reads the API and runs iptables. */
export interface DegradedDeps {
  getPod(namespace: string, name: string): Promise<Pod | undefined>;
  getNamespace(name: string): Promise<Namespace | undefined>;
  applySidecar(pod: Pod, netns: string, podIps: readonly string[]): Promise<string>;
  verifySidecar(pod: Pod, netns: string): Promise<string[]>;
  sleep(ms: number): Promise<void>;
  now(): number;
}

export interface RetryPolicy {
  /** Give up after this long: well under the runtime's CNI timeout. */
  deadlineMs: number;
  intervalMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { deadlineMs: 20_000, intervalMs: 1_000 };

/** Reads with bounded retries; `Unauthorized` is not retried (a new token needs the agent). */
async function withRetries<T>(deps: DegradedDeps, policy: RetryPolicy, what: string, read: () => Promise<T>): Promise<T> {
  const deadline = deps.now() + policy.deadlineMs;
  let attempt = 0;
  for (;;) {
    attempt++;
    try {
      return await read();
    } catch (err) {
      if (err instanceof ApiUnauthorizedError) {
        throw new CniError(ErrorCode.TryAgainLater, `istio-cni agent unreachable and ${what} failed: ${err.message}`);
      }
      if (deps.now() + policy.intervalMs >= deadline) {
        throw new CniError(
          ErrorCode.TryAgainLater,
          `istio-cni agent unreachable and ${what} failed after ${attempt} attempt(s): ${(err as Error).message}`,
        );
      }
      await deps.sleep(policy.intervalMs);
    }
  }
}

export type DegradedOutcome = { action: 'skipped'; reason: string } | { action: 'redirected'; outcome: string };

interface Classified {
  kind: 'skip' | 'sidecar';
  pod?: Pod;
  reason: string;
}

async function classify(
  deps: DegradedDeps,
  config: PluginConfig,
  k8s: K8sArgs,
  policy: RetryPolicy,
): Promise<Classified> {
  const pod = await withRetries(deps, policy, `reading pod ${k8s.podNamespace}/${k8s.podName}`, () =>
    deps.getPod(k8s.podNamespace, k8s.podName),
  );
  if (pod === undefined) {
    throw new CniError(ErrorCode.TryAgainLater, `pod ${k8s.podNamespace}/${k8s.podName} not found in the Kubernetes API`);
  }
  if (config.ambientEnabled) {
    const namespace = await withRetries(deps, policy, `reading namespace ${k8s.podNamespace}`, () =>
      deps.getNamespace(k8s.podNamespace),
    );
    const selectors = parseEnablementSelectors(config.enablementSelectors);
    if (ambientEnabledFor(pod, namespace, selectors)) {
      // Fail closed: only the agent can hand an ambient pod to ztunnel.
      throw new CniError(ErrorCode.TryAgainLater, 'ambient pod cannot start while the istio-cni node agent is unreachable');
    }
  }
  const decision = sidecarDecision(pod);
  return decision.redirect ? { kind: 'sidecar', pod, reason: 'sidecar' } : { kind: 'skip', reason: decision.reason };
}

/**
 * ADD when the agent is unreachable (ARCHITECTURE §5): read the pod from the API directly; not a
 * mesh pod → pass through; sidecar pod → program the capture rules here with the agent's code;
 * ambient pod → code 11.
 */
export async function degradedAdd(
  deps: DegradedDeps,
  config: PluginConfig,
  k8s: K8sArgs,
  netns: string,
  podIps: readonly string[],
  log: Logger,
  policy: RetryPolicy = DEFAULT_RETRY,
): Promise<DegradedOutcome> {
  const c = await classify(deps, config, k8s, policy);
  if (c.kind === 'skip' || c.pod === undefined) return { action: 'skipped', reason: c.reason };
  try {
    const outcome = await deps.applySidecar(c.pod, netns, podIps);
    log.info('sidecar capture programmed by the plugin (agent unreachable)', { outcome });
    return { action: 'redirected', outcome };
  } catch (err) {
    if (err instanceof AnnotationError) throw new CniError(ErrorCode.InvalidNetworkConfig, err.message);
    // Code 8: see PodNetnsRefusedError.
    if (err instanceof PodNetnsRefusedError) throw new CniError(ErrorCode.InvalidNetNS, err.message);
    throw err;
  }
}

/** CHECK when the agent is unreachable: verify a sidecar pod's rules directly. */
export async function degradedCheck(
  deps: DegradedDeps,
  config: PluginConfig,
  k8s: K8sArgs,
  netns: string,
  policy: RetryPolicy = DEFAULT_RETRY,
): Promise<void> {
  const c = await classify(deps, config, k8s, policy);
  if (c.kind === 'skip' || c.pod === undefined) return;
  let missing: string[];
  try {
    missing = await deps.verifySidecar(c.pod, netns);
  } catch (err) {
    if (err instanceof AnnotationError) throw new CniError(ErrorCode.InvalidNetworkConfig, err.message);
    throw err;
  }
  if (missing.length > 0) {
    throw new CniError(ErrorCode.Internal, 'sidecar capture rules are not in place', missing.slice(0, 20).join('; '));
  }
}
