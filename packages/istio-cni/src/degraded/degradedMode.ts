import { captureFailure, decidePod, missingRulesFailure, type Namespace, type Pod, type PodFailure } from '@istio-cni/capture';
import { CniError, ErrorCode, type K8sArgs } from '@istio-cni/cni';
import { UPGRADE_HANDOVER_GRACE_MS, localPolicyOf, type Logger, type PluginConfig } from '@istio-cni/handoff';
// Not the `sidecar` entry: that would load the capture code (child processes) for every pod.
import { PodNetnsRefusedError } from '@istio-cni/dataplane/podNetnsGuard';
import { uncapturedIpv6Warning } from '@istio-cni/dataplane/podIpFamily';
import { retryWithBackoff } from '@istio-cni/kube/client';
import { ApiRequestError, ApiUnauthorizedError } from './apiReader.ts';

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

/** An answer retrying cannot change: a 4xx other than 429 (404 is "no such object", not an error). */
function isFinalAnswer(err: unknown): boolean {
  return err instanceof ApiRequestError && err.status !== undefined && err.status >= 400 && err.status < 500 && err.status !== 429;
}

/**
 * Reads with bounded retries at a steady interval (each read has the client's own short retries
 * inside); `Unauthorized` is not retried (a new token needs the agent), nor another final answer.
 */
async function withRetries<T>(deps: DegradedDeps, policy: RetryPolicy, what: string, read: () => Promise<T>): Promise<T> {
  let attempts = 0;
  try {
    return await retryWithBackoff(
      () => {
        attempts++;
        return read();
      },
      {
        policy: { initialMs: policy.intervalMs, maxMs: policy.intervalMs, jitter: 0 },
        maxAttempts: Number.MAX_SAFE_INTEGER,
        deadlineMs: policy.deadlineMs,
        classify: (err) => ({ retry: !(err instanceof ApiUnauthorizedError) && !isFinalAnswer(err) }),
        sleep: (ms) => deps.sleep(ms),
        now: () => deps.now(),
      },
    );
  } catch (err) {
    if (err instanceof ApiUnauthorizedError) {
      throw new CniError(ErrorCode.TryAgainLater, `istio-cni agent unreachable and ${what} failed: ${err.message}`);
    }
    throw new CniError(
      ErrorCode.TryAgainLater,
      `istio-cni agent unreachable and ${what} failed after ${attempts} attempt(s): ${(err as Error).message}`,
    );
  }
}

export type DegradedOutcome = { action: 'skipped'; reason: string } | { action: 'redirected'; outcome: string };

function cniError(f: PodFailure): CniError {
  return new CniError(f.code, f.msg, f.details ?? '');
}

/** The sidecar pod to program or verify, `undefined` for a pod to pass through; throws the CNI error otherwise. */
async function sidecarPodOrSkip(
  deps: DegradedDeps,
  config: PluginConfig,
  k8s: K8sArgs,
  policy: RetryPolicy,
): Promise<{ pod: Pod } | { reason: string }> {
  const pod = await withRetries(deps, policy, `reading pod ${k8s.podNamespace}/${k8s.podName}`, () =>
    deps.getPod(k8s.podNamespace, k8s.podName),
  );
  let namespace: Namespace | undefined;
  if (pod !== undefined && config.ambientEnabled) {
    namespace = await withRetries(deps, policy, `reading namespace ${k8s.podNamespace}`, () => deps.getNamespace(k8s.podNamespace));
  }
  const decision = decidePod({
    podName: k8s.podName,
    podNamespace: k8s.podNamespace,
    policy: localPolicyOf(config),
    ambient: { enabled: config.ambientEnabled, selectors: config.enablementSelectors },
    found: { pod, namespace },
  });
  switch (decision.action) {
    case 'skip':
      return { reason: decision.reason };
    case 'fail':
      throw cniError(decision);
    case 'ambient':
      // Fail closed: only the agent can hand an ambient pod to ztunnel.
      throw new CniError(ErrorCode.TryAgainLater, 'ambient pod cannot start while the istio-cni node agent is unreachable');
    case 'sidecar':
      return { pod: decision.pod };
  }
}

/**
 * ADD when the agent is unreachable (docs/architecture.md "Degraded mode"): read the pod from the API directly; not a
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
  const c = await sidecarPodOrSkip(deps, config, k8s, policy);
  if (!('pod' in c)) return { action: 'skipped', reason: c.reason };
  try {
    const outcome = await deps.applySidecar(c.pod, netns, podIps);
    log.info('sidecar capture programmed by the plugin (agent unreachable)', { outcome });
    const bypass = uncapturedIpv6Warning(c.pod, podIps);
    if (bypass !== undefined) log.warn(bypass.msg, { ipv6: bypass.ipv6 });
    return { action: 'redirected', outcome };
  } catch (err) {
    const refused = captureFailure(err);
    if (refused) throw cniError(refused);
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
  const c = await sidecarPodOrSkip(deps, config, k8s, policy);
  if (!('pod' in c)) return;
  let missing: string[];
  try {
    missing = await deps.verifySidecar(c.pod, netns);
  } catch (err) {
    const refused = captureFailure(err);
    if (refused) throw cniError(refused);
    // Code 8, as ADD: see PodNetnsRefusedError.
    if (err instanceof PodNetnsRefusedError) throw new CniError(ErrorCode.InvalidNetNS, err.message);
    throw err;
  }
  const notInPlace = missingRulesFailure(missing);
  if (notInPlace) throw cniError(notInPlace);
}

/**
 * Whether the node can take pods with the agent not ready (docs/architecture.md "Degraded mode",
 * STATUS): while an agent that stopped for an upgrade handed over less than
 * UPGRADE_HANDOVER_GRACE_MS ago (its successor is on the way; an ADD meanwhile gets code 11 at
 * worst and is retried); otherwise when degraded mode could decide any pod: never with ambient
 * enabled (only the agent hands a pod to ztunnel), else when the installer's kubeconfig is there and
 * its token reads pods. `probe` makes that one read and throws what the API answered;
 * `handoverAgeMs` is the hand-over file's age, `undefined` without one. Resolves `undefined` when
 * the node can take pods, otherwise with the reason.
 */
export async function degradedStatus(
  config: PluginConfig,
  probe: () => Promise<void>,
  handoverAgeMs: () => Promise<number | undefined> = async () => undefined,
): Promise<string | undefined> {
  const age = await handoverAgeMs();
  if (age !== undefined && age >= 0 && age < UPGRADE_HANDOVER_GRACE_MS) return undefined;
  if (config.ambientEnabled) return 'ambient is enabled and only the agent can enrol an ambient pod';
  try {
    await probe();
    return undefined;
  } catch (err) {
    return `degraded mode cannot decide pods either: ${(err as Error).message}`;
  }
}
