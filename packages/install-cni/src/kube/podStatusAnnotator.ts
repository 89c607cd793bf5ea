import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';

/** Sets (or with `null` removes) one pod annotation through the `pods/status` subresource. */
export interface PodAnnotator {
  annotate(namespace: string, name: string, key: string, value: string | null): Promise<void>;
}

function isNotFound(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: number }).code === 404;
}

/**
 * A JSON merge patch on `pods/status` (SPEC 4.1): the only write the ambient agent needs on pods, so
 * RBAC grants `pods/status` patch and nothing on `pods` itself. A pod that is gone is not an error.
 */
export function createPodAnnotator(kc: KubeConfig): PodAnnotator {
  const core = kc.makeApiClient(CoreV1Api);
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  return {
    async annotate(namespace, name, key, value) {
      try {
        await core.patchNamespacedPodStatus({ name, namespace, body: { metadata: { annotations: { [key]: value } } } }, mergePatch);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    },
  };
}
