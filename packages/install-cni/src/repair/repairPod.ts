import type { ObjectMeta, Pod, PodStatus } from '@istio-cni/capture';

/** `core/v1` ContainerStateTerminated, the fields repair reads. */
export interface ContainerStateTerminated {
  readonly exitCode?: number;
  readonly reason?: string;
  readonly message?: string;
}

export interface ContainerState {
  readonly terminated?: ContainerStateTerminated;
  readonly waiting?: { readonly reason?: string; readonly message?: string };
  readonly running?: { readonly startedAt?: string };
}

export interface ContainerStatus {
  readonly name: string;
  readonly state?: ContainerState;
  readonly lastState?: ContainerState;
}

/** A pod as the repair controller sees it: the capture subset plus what detection and preconditions need. */
export interface RepairPod extends Pod {
  readonly metadata: ObjectMeta & { readonly resourceVersion?: string; readonly deletionTimestamp?: string };
  readonly status?: PodStatus & { readonly initContainerStatuses?: readonly ContainerStatus[] };
}

/** `namespace/name`, the work queue key and the name used in every log line. */
export function podKey(pod: Pick<Pod, 'metadata'>): string {
  return `${pod.metadata.namespace ?? ''}/${pod.metadata.name ?? ''}`;
}
