import { randomBytes } from 'node:crypto';
import { KubeApiError, MERGE_PATCH, eventsPath, podPath, podStatusPath, type KubeClient } from '@istio-cni/kube';
import type { EventType, RepairApi } from './repairApi.ts';
import type { RepairPod } from './repairPod.ts';

export const REPAIR_EVENT_COMPONENT = 'cni-repair';

function nameOf(pod: RepairPod): { name: string; namespace: string } {
  const { name, namespace } = pod.metadata;
  if (!name || !namespace) throw new Error(`pod without name or namespace: ${JSON.stringify(pod.metadata)}`);
  return { name, namespace };
}

/** {@link RepairApi} over the daemon's own API client. */
export function createKubeRepairApi(client: KubeClient, options: { nodeName: string }): RepairApi {
  return {
    async deletePod(pod) {
      const preconditions = {
        ...(pod.metadata.uid ? { uid: pod.metadata.uid } : {}),
        ...(pod.metadata.resourceVersion ? { resourceVersion: pod.metadata.resourceVersion } : {}),
      };
      const { name, namespace } = nameOf(pod);
      await client.request({
        method: 'DELETE',
        path: podPath(namespace, name),
        // The uid/resourceVersion preconditions keep a resend from deleting a successor pod.
        idempotent: true,
        body: { kind: 'DeleteOptions', apiVersion: 'v1', preconditions },
      });
    },
    async labelPod(pod, key, value) {
      const { name, namespace } = nameOf(pod);
      await client.request({
        method: 'PATCH',
        path: podStatusPath(namespace, name),
        contentType: MERGE_PATCH,
        idempotent: true,
        body: { metadata: { labels: { [key]: value } } },
      });
    },
    async recordEvent(pod, type: EventType, reason, message) {
      const { name, namespace } = nameOf(pod);
      const now = new Date();
      // client-go's recorder names events `<object>.<unique hex>` the same way.
      const eventName = `${name}.${now.getTime().toString(16)}${randomBytes(2).toString('hex')}`;
      const created = client.request({
        method: 'POST',
        path: eventsPath(namespace),
        // The name is fixed before the first attempt, so a resend can only find its own event.
        idempotent: true,
        body: {
          apiVersion: 'v1',
          kind: 'Event',
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
          firstTimestamp: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
          lastTimestamp: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
          source: { component: REPAIR_EVENT_COMPONENT, host: options.nodeName },
          reportingComponent: REPAIR_EVENT_COMPONENT,
          reportingInstance: options.nodeName,
        },
      });
      try {
        await created;
      } catch (err) {
        // An earlier attempt was created but its answer lost.
        if (!(err instanceof KubeApiError && err.code === 409)) throw err;
      }
    },
  };
}
