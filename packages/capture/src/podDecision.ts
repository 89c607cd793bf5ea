import { ErrorCode, type ErrorCodeValue } from '@istio-cni/cni';
import { AnnotationError } from './annotationError.ts';
import { ambientEnabledFor, type EnablementSelector } from './enablementSelectors.ts';
import { localSkipReason, type LocalPolicy } from './localSkipReason.ts';
import type { Namespace, Pod } from './podTypes.ts';
import { sidecarDecision } from './sidecarDecision.ts';

export interface AmbientSelection {
  enabled: boolean;
  selectors: readonly EnablementSelector[];
}

/** The pod as the Kubernetes API has it (`undefined`: not found) and its namespace, when read. */
export interface FoundPod {
  pod: Pod | undefined;
  namespace: Namespace | undefined;
}

export interface PodDecisionInput {
  /** From CNI_ARGS. */
  podName: string;
  podNamespace: string;
  policy: LocalPolicy;
  ambient: AmbientSelection;
  /** Absent until the pod was read: CNI_ARGS alone then either skip the pod or ask for it. */
  found?: FoundPod;
}

/** A refusal: the CNI error code and message the runtime gets. */
export interface PodFailure {
  code: ErrorCodeValue;
  msg: string;
  details?: string;
}

export type PodDecision =
  | { readonly action: 'skip'; readonly reason: string }
  | { readonly action: 'sidecar'; readonly pod: Pod }
  | { readonly action: 'ambient'; readonly pod: Pod }
  | ({ readonly action: 'fail' } & Readonly<PodFailure>);

export type PodLookupNeeded = { readonly action: 'lookup' };

/**
 * What ADD (and CHECK) does with a pod, in upstream order: the pass-throughs decided from CNI_ARGS
 * alone (agent pod, not a Kubernetes pod, excluded namespace); then, once the pod was read, a pod
 * the API does not know fails with "try again later"; ambient selection (only with ambient on);
 * then the sidecar checks. Called first without `found` so an excluded pod costs no API read.
 * Shared by the agent and the plugin's degraded mode.
 */
export function decidePod(input: PodDecisionInput & { found: FoundPod }): PodDecision;
export function decidePod(input: PodDecisionInput): PodDecision | PodLookupNeeded;
export function decidePod(input: PodDecisionInput): PodDecision | PodLookupNeeded {
  const skip = localSkipReason(input.podName, input.podNamespace, input.policy);
  if (skip !== undefined) return { action: 'skip', reason: skip };
  if (input.found === undefined) return { action: 'lookup' };
  const { pod, namespace } = input.found;
  if (pod === undefined) {
    return {
      action: 'fail',
      code: ErrorCode.TryAgainLater,
      msg: `pod ${input.podNamespace}/${input.podName} not found in the Kubernetes API`,
    };
  }
  if (input.ambient.enabled && ambientEnabledFor(pod, namespace, input.ambient.selectors)) return { action: 'ambient', pod };
  const sidecar = sidecarDecision(pod);
  return sidecar.redirect ? { action: 'sidecar', pod } : { action: 'skip', reason: sidecar.reason };
}

/**
 * The CNI error for a failure to program or verify a sidecar pod's capture, when it is the pod's
 * fault: an invalid annotation is code 7 and its message names the annotation and the value.
 * `undefined` for any other failure.
 */
export function captureFailure(err: unknown): PodFailure | undefined {
  if (err instanceof AnnotationError) return { code: ErrorCode.InvalidNetworkConfig, msg: err.message };
  return undefined;
}

/** How many differences a failed CHECK lists in its details. */
const MISSING_RULES_SHOWN = 20;

/** CHECK of a sidecar pod: `undefined` when its capture rules are in place, else the code-999 error. */
export function missingRulesFailure(missing: readonly string[]): PodFailure | undefined {
  if (missing.length === 0) return undefined;
  return {
    code: ErrorCode.Internal,
    msg: 'sidecar capture rules are not in place',
    details: missing.slice(0, MISSING_RULES_SHOWN).join('; '),
  };
}
