import { KubeApiError, MERGE_PATCH, type KubeClient } from '@istio-cni/kube';

/** Sets (or with `null` removes) one pod annotation through the `pods/status` subresource. */
export interface PodAnnotator {
  annotate(namespace: string, name: string, key: string, value: string | null): Promise<void>;
}

export function podStatusPath(namespace: string, name: string): string {
  return `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}/status`;
}

/**
 * A JSON merge patch on `pods/status` (SPEC 4.1): the only write the ambient agent needs on pods, so
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
          body: { metadata: { annotations: { [key]: value } } },
        });
      } catch (err) {
        if (!(err instanceof KubeApiError && err.code === 404)) throw err;
      }
    },
  };
}
