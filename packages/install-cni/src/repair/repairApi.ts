import type { RepairPod } from './repairPod.ts';

export type EventType = 'Normal' | 'Warning';

/**
 * Everything the repair controller asks of the Kubernetes API, so its logic is tested with a
 * fake. The real implementation is `createKubeRepairApi`.
 */
export interface RepairApi {
  /** DELETE with preconditions on UID and resourceVersion: never deletes a newer pod of the same name. */
  deletePod(pod: RepairPod): Promise<void>;
  /** JSON merge patch of `metadata.labels` through the `pods/status` subresource (lower privilege than `pods`). */
  labelPod(pod: RepairPod, key: string, value: string): Promise<void>;
  /** A core/v1 Event about `pod`, from component `cni-repair`. */
  recordEvent(pod: RepairPod, type: EventType, reason: string, message: string): Promise<void>;
}
