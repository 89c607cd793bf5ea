import { randomBytes } from 'node:crypto';
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import type { EventType, RepairApi } from './repairApi.ts';
import type { RepairPod } from './repairPod.ts';

export const REPAIR_EVENT_COMPONENT = 'cni-repair';

function nameOf(pod: RepairPod): { name: string; namespace: string } {
  const { name, namespace } = pod.metadata;
  if (!name || !namespace) throw new Error(`pod without name or namespace: ${JSON.stringify(pod.metadata)}`);
  return { name, namespace };
}

/** {@link RepairApi} over client-node with the daemon's own credentials. */
export function createKubeRepairApi(kc: KubeConfig, options: { nodeName: string }): RepairApi {
  const core = kc.makeApiClient(CoreV1Api);
  return {
    async deletePod(pod) {
      const preconditions = {
        ...(pod.metadata.uid ? { uid: pod.metadata.uid } : {}),
        ...(pod.metadata.resourceVersion ? { resourceVersion: pod.metadata.resourceVersion } : {}),
      };
      await core.deleteNamespacedPod({ ...nameOf(pod), body: { preconditions } });
    },
    async labelPod(pod, key, value) {
      await core.patchNamespacedPodStatus(
        { ...nameOf(pod), body: { metadata: { labels: { [key]: value } } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    },
    async recordEvent(pod, type: EventType, reason, message) {
      const { name, namespace } = nameOf(pod);
      const now = new Date();
      // client-go's recorder names events `<object>.<unique hex>` the same way.
      const eventName = `${name}.${now.getTime().toString(16)}${randomBytes(2).toString('hex')}`;
      await core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name: eventName, namespace },
          involvedObject: {
            apiVersion: 'v1',
            kind: 'Pod',
            name,
            namespace,
            ...(pod.metadata.uid ? { uid: pod.metadata.uid } : {}),
            ...(pod.metadata.resourceVersion ? { resourceVersion: pod.metadata.resourceVersion } : {}),
          },
          type,
          reason,
          message,
          count: 1,
          firstTimestamp: now,
          lastTimestamp: now,
          source: { component: REPAIR_EVENT_COMPONENT, host: options.nodeName },
          reportingComponent: REPAIR_EVENT_COMPONENT,
          reportingInstance: options.nodeName,
        },
      });
    },
  };
}
