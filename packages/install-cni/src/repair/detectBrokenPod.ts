import type { ContainerStateTerminated, RepairPod } from './repairPod.ts';

/** The REPAIR_* filters; an empty string or 0 switches that filter off. */
export interface BrokenPodFilter {
  sidecarAnnotation: string;
  initContainerName: string;
  initContainerTerminationMessage: string;
  initContainerExitCode: number;
}

/**
 * True when the pod's validation init container last terminated the way a pod started without
 * capture does (upstream `matchesFilter`). A container whose current
 * state is a successful exit is never broken, whatever its previous run did: the pod already
 * recovered.
 */
export function isBrokenPod(pod: RepairPod, filter: BrokenPodFilter): boolean {
  if (filter.sidecarAnnotation !== '' && !Object.hasOwn(pod.metadata.annotations ?? {}, filter.sidecarAnnotation)) return false;
  const wantedMessage = filter.initContainerTerminationMessage.trim();
  const matches = (t: ContainerStateTerminated): boolean =>
    (wantedMessage === '' || wantedMessage === (t.message ?? '').trim()) &&
    (filter.initContainerExitCode === 0 || filter.initContainerExitCode === (t.exitCode ?? 0));
  for (const status of pod.status?.initContainerStatuses ?? []) {
    if (filter.initContainerName !== '' && status.name !== filter.initContainerName) continue;
    const current = status.state?.terminated;
    if (current !== undefined && (current.reason === 'Completed' || (current.exitCode ?? 0) === 0)) continue;
    const last = status.lastState?.terminated;
    if (last !== undefined && matches(last)) return true;
  }
  return false;
}
