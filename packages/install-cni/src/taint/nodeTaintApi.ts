import { JSON_PATCH, nodePath, type KubeClient } from '@istio-cni/kube';

export interface Taint {
  key: string;
  value?: string;
  effect: string;
}

export type JsonPatchOp = { op: 'test'; path: string; value: unknown } | { op: 'remove'; path: string };

/** The two calls the taint remover makes on its own Node (RBAC: `nodes` get, patch). */
export interface NodeTaintApi {
  getTaints(nodeName: string): Promise<readonly Taint[]>;
  /** RFC 6902 JSON patch; a failed `test` op rejects the whole patch. */
  patchNode(nodeName: string, ops: readonly JsonPatchOp[]): Promise<void>;
}

export function createKubeNodeTaintApi(client: KubeClient): NodeTaintApi {
  return {
    async getTaints(name) {
      const node = await client.request<{ spec?: { taints?: Taint[] } }>({ method: 'GET', path: nodePath(name) });
      return (node.spec?.taints ?? []).map((t) => ({ key: t.key, effect: t.effect, ...(t.value === undefined ? {} : { value: t.value }) }));
    },
    async patchNode(name, ops) {
      // The `test` ops make a resend safe: once applied, it fails them instead of removing another taint.
      await client.request({ method: 'PATCH', path: nodePath(name), contentType: JSON_PATCH, idempotent: true, body: ops });
    },
  };
}
