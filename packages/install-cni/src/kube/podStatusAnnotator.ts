import { MERGE_PATCH, isNotFound, podStatusPath, type KubeClient } from '@istio-cni/kube';

/** Sets (or with `null` removes) one pod annotation through the `pods/status` subresource. */
export interface PodAnnotator {
  annotate(namespace: string, name: string, key: string, value: string | null): Promise<void>;
}

/**
 * A JSON merge patch on `pods/status` (as upstream): the only write the ambient agent needs on pods, so
 * RBAC grants `pods/status` patch and nothing on `pods` itself. A pod that is gone is not an error.
 */
export function createPodAnnotator(client: KubeClient): PodAnnotator {
  return {
    async annotate(namespace, name, key, value) {
      try {
        await client.request({
          method: 'PATCH',
          path: podStatusPath(namespace, name),
          contentType: MERGE_PATCH,
          // Setting one key to one value: sending it twice changes nothing.
          idempotent: true,
          body: { metadata: { annotations: { [key]: value } } },
        });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    },
  };
}
