import type { Pod } from '@istio-cni/capture';

/** Enrolment status annotation on pods (as upstream), written on the `pods/status` subresource. */
export const REDIRECTION_ANNOTATION = 'ambient.istio.io/redirection';
export type RedirectionState = 'enabled' | 'pending';

/** A failure worth retrying (ztunnel not connected or not acking, API hiccups). */
export class RetryableError extends Error {
  override name = 'RetryableError';
}

/** A failure retrying cannot fix (no netns for the pod, rules rejected by the kernel). */
export class NonRetryableError extends Error {
  override name = 'NonRetryableError';
}

/**
 * The ambient data plane for one node (upstream `meshdataplane_linux.go`). `addPodToMesh` is idempotent: the informer may
 * call it again for a pod that is already enrolled, and must converge.
 */
export interface MeshDataplane {
  /** `netnsPath` comes from the CNI event; `undefined` means "find it in /proc". */
  addPodToMesh(pod: Pod, ips: readonly string[], netnsPath: string | undefined): Promise<void>;
  /** `isDelete`: the pod is gone, so its netns is too (in-pod rules are not touched). */
  removePodFromMesh(pod: Pod, isDelete: boolean): Promise<void>;
  /**
   * Follows an enrolled pod whose IPs changed: re-asserts its host probe-set entries, and when the
   * network namespace held for it no longer carries those IPs (its sandbox was re-created by an ADD
   * that did not reach this agent), enrols the pod's new netns instead.
   */
  syncPodIps(pod: Pod, ips: readonly string[]): Promise<void>;
  /**
   * Enrols the pod's current netns (found in /proc by UID and `ips`) in place of the one held for it,
   * which is released untouched: ztunnel told the pod is gone, the handle closed, and the pod's
   * probe-set entries for IPs it no longer has removed.
   */
  replaceNetns(pod: Pod, ips: readonly string[]): Promise<void>;
  /** Whether this agent holds an open network namespace for the pod (enrolled here, not only known). */
  holdsNetns(uid: string): boolean;
}

export function redirectionState(pod: Pod): RedirectionState | undefined {
  const v = pod.metadata.annotations?.[REDIRECTION_ANNOTATION];
  return v === 'enabled' || v === 'pending' ? v : undefined;
}

/** `status.podIPs`, else `status.podIP` (as upstream `informers.go`). */
export function podIps(pod: Pod): string[] {
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip).filter((ip) => ip !== '');
  if (ips.length > 0) return ips;
  return pod.status?.podIP ? [pod.status.podIP] : [];
}

export function isTerminal(pod: Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}
