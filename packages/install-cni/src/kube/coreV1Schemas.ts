import { messageSchema, type ProtobufObjectType } from '@istio-cni/kube';

/**
 * The fields of a Pod and a Namespace the agent keeps from its watches, with their numbers in
 * `k8s.io/api/core/v1/generated.proto` and apimachinery's `meta/v1/generated.proto`: the fields of
 * `Pod` and `Namespace` (`@istio-cni/capture`) and `RepairPod` (repair/repairPod.ts). A field read
 * from a cached object must be listed here, or it is never there: the watch decodes protobuf, and
 * projects a JSON answer, onto exactly these (test/coreV1Schemas.test.ts decodes both encodings
 * of the same pods as a real API server sent them, recorded by test/e2e/fixtures/captureCoreV1.ts).
 */

const objectMeta = messageSchema({
  1: { name: 'name', kind: 'string' },
  3: { name: 'namespace', kind: 'string' },
  5: { name: 'uid', kind: 'string' },
  6: { name: 'resourceVersion', kind: 'string' },
  9: { name: 'deletionTimestamp', kind: 'time' },
  11: { name: 'labels', kind: 'map' },
  12: { name: 'annotations', kind: 'map' },
});

const container = messageSchema({
  1: { name: 'name', kind: 'string', keepZero: true },
  4: { name: 'args', kind: 'string', repeated: true },
  7: {
    name: 'env',
    kind: 'message',
    repeated: true,
    schema: messageSchema({ 1: { name: 'name', kind: 'string', keepZero: true }, 2: { name: 'value', kind: 'string' } }),
  },
  15: {
    name: 'securityContext',
    kind: 'message',
    // Pointers in Go: sent only when set, and 0 (root) is a value.
    schema: messageSchema({
      4: { name: 'runAsUser', kind: 'int', keepZero: true },
      8: { name: 'runAsGroup', kind: 'int', keepZero: true },
    }),
  },
});

const containerState = messageSchema({
  1: {
    name: 'waiting',
    kind: 'message',
    schema: messageSchema({ 1: { name: 'reason', kind: 'string' }, 2: { name: 'message', kind: 'string' } }),
  },
  2: { name: 'running', kind: 'message', schema: messageSchema({ 1: { name: 'startedAt', kind: 'time' } }) },
  3: {
    name: 'terminated',
    kind: 'message',
    schema: messageSchema({
      // `json:"exitCode"`, no omitempty: 0 is in the JSON, and is what "completed" means.
      1: { name: 'exitCode', kind: 'int', keepZero: true },
      3: { name: 'reason', kind: 'string' },
      4: { name: 'message', kind: 'string' },
    }),
  },
});

const pod = messageSchema({
  1: { name: 'metadata', kind: 'message', schema: objectMeta },
  2: {
    name: 'spec',
    kind: 'message',
    schema: messageSchema({
      2: { name: 'containers', kind: 'message', repeated: true, schema: container },
      8: { name: 'serviceAccountName', kind: 'string' },
      10: { name: 'nodeName', kind: 'string' },
      11: { name: 'hostNetwork', kind: 'bool' },
      20: { name: 'initContainers', kind: 'message', repeated: true, schema: container },
    }),
  },
  3: {
    name: 'status',
    kind: 'message',
    schema: messageSchema({
      1: { name: 'phase', kind: 'string' },
      6: { name: 'podIP', kind: 'string' },
      10: {
        name: 'initContainerStatuses',
        kind: 'message',
        repeated: true,
        schema: messageSchema({
          1: { name: 'name', kind: 'string', keepZero: true },
          2: { name: 'state', kind: 'message', schema: containerState },
          3: { name: 'lastState', kind: 'message', schema: containerState },
        }),
      },
      12: { name: 'podIPs', kind: 'message', repeated: true, schema: messageSchema({ 1: { name: 'ip', kind: 'string', keepZero: true } }) },
    }),
  },
});

export const POD_TYPE: ProtobufObjectType = { kind: 'Pod', schema: pod };

export const NAMESPACE_TYPE: ProtobufObjectType = {
  kind: 'Namespace',
  schema: messageSchema({ 1: { name: 'metadata', kind: 'message', schema: objectMeta } }),
};
