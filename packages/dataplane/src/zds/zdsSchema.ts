/**
 * The ZDS protocol schema (`pkg/zdsapi/zds.proto`, package `istio.workload.zds`) built with
 * protobufjs reflection: no .proto file to ship or parse at run time. Names and field numbers are
 * the contract with ztunnel; note `DelWorkload.uid = 2` and `WorkloadRequest.keep = 5`.
 */
import protobuf from 'protobufjs';

/** `enum Version`. */
export const ZDS_VERSION = { NOT_USED: 0, V1: 1 } as const;

function message(name: string, fields: [name: string, id: number, type: string][]): protobuf.Type {
  const type = new protobuf.Type(name);
  for (const [fieldName, id, fieldType] of fields) type.add(new protobuf.Field(fieldName, id, fieldType));
  return type;
}

function oneofMessage(name: string, fields: [name: string, id: number, type: string][]): protobuf.Type {
  const type = message(name, fields);
  type.add(
    new protobuf.OneOf(
      'payload',
      fields.map(([fieldName]) => fieldName),
    ),
  );
  return type;
}

function buildRoot(): protobuf.Root {
  const root = new protobuf.Root();
  const ns = root.define('istio.workload.zds');
  ns.add(new protobuf.Enum('Version', { ...ZDS_VERSION }));
  ns.add(message('ZdsHello', [['version', 1, 'Version']]));
  const workloadInfo = message('WorkloadInfo', [
    ['name', 1, 'string'],
    ['namespace', 2, 'string'],
    ['service_account', 3, 'string'],
  ]);
  workloadInfo.reserved = [[4, 4], 'trust_domain'];
  ns.add(workloadInfo);
  ns.add(
    message('AddWorkload', [
      ['uid', 1, 'string'],
      ['workload_info', 2, 'WorkloadInfo'],
    ]),
  );
  ns.add(message('KeepWorkload', [['uid', 1, 'string']]));
  ns.add(message('DelWorkload', [['uid', 2, 'string']]));
  ns.add(message('SnapshotSent', []));
  ns.add(message('Ack', [['error', 1, 'string']]));
  ns.add(
    oneofMessage('WorkloadRequest', [
      ['add', 1, 'AddWorkload'],
      ['keep', 5, 'KeepWorkload'],
      ['del', 2, 'DelWorkload'],
      ['snapshot_sent', 3, 'SnapshotSent'],
    ]),
  );
  ns.add(oneofMessage('WorkloadResponse', [['ack', 1, 'Ack']]));
  root.resolveAll();
  return root;
}

let root: protobuf.Root | undefined;

/**
 * The schema root, built on first use: resolving it costs milliseconds of CPU that a daemon without
 * ambient never needs. Exported for tests that compare it with the upstream .proto.
 */
export function zdsRoot(): protobuf.Root {
  root ??= buildRoot();
  return root;
}

const lookup = (name: string): protobuf.Type => zdsRoot().lookupType(`istio.workload.zds.${name}`);
let types: { hello: protobuf.Type; request: protobuf.Type; response: protobuf.Type } | undefined;
const zdsTypes = () => {
  types ??= { hello: lookup('ZdsHello'), request: lookup('WorkloadRequest'), response: lookup('WorkloadResponse') };
  return types;
};

/** Wire-level shapes, keyed by the .proto field names. */
export interface ZdsWorkloadInfo {
  name: string;
  namespace: string;
  service_account: string;
}

export type WorkloadRequest =
  | { add: { uid: string; workload_info?: ZdsWorkloadInfo } }
  | { keep: { uid: string } }
  | { del: { uid: string } }
  | { snapshot_sent: Record<string, never> };

export interface ZdsHello {
  version: number;
}

export interface WorkloadResponse {
  ack?: { error: string };
}

function decode(type: protobuf.Type, bytes: Uint8Array): Record<string, unknown> {
  const decoded = type.decode(bytes);
  return type.toObject(decoded, { defaults: true, oneofs: false, enums: Number, longs: Number }) as Record<string, unknown>;
}

/**
 * Drops empty strings and zero numbers, so the bytes match what Go's proto3 marshaller writes
 * (protobufjs writes every field that is set, defaults included). Sub-messages stay: their
 * presence is the oneof choice.
 */
function withoutDefaults(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === '' || v === 0 || v === undefined) continue;
    out[k] = withoutDefaults(v);
  }
  return out;
}

function encode(type: protobuf.Type, value: object): Uint8Array {
  return type.encode(type.fromObject(withoutDefaults(value) as Record<string, unknown>)).finish();
}

export function encodeWorkloadRequest(request: WorkloadRequest): Uint8Array {
  return encode(zdsTypes().request, request);
}

/** Decodes a request (the fake ztunnel's side); throws on bytes that are not one. */
export function decodeWorkloadRequest(bytes: Uint8Array): WorkloadRequest {
  const WorkloadRequestType = zdsTypes().request;
  const decoded = WorkloadRequestType.decode(bytes);
  const present = ['add', 'keep', 'del', 'snapshot_sent'].filter((k) => (decoded as unknown as Record<string, unknown>)[k] != null);
  if (present.length !== 1) throw new Error(`WorkloadRequest carries ${present.length} payloads, want 1`);
  return WorkloadRequestType.toObject(decoded, { defaults: true }) as WorkloadRequest;
}

export function encodeWorkloadResponse(response: WorkloadResponse): Uint8Array {
  return encode(zdsTypes().response, response);
}

export function decodeWorkloadResponse(bytes: Uint8Array): WorkloadResponse {
  const obj = decode(zdsTypes().response, bytes);
  const ack = obj.ack as { error?: string } | null | undefined;
  return ack == null ? {} : { ack: { error: ack.error ?? '' } };
}

export function encodeZdsHello(hello: ZdsHello): Uint8Array {
  return encode(zdsTypes().hello, hello);
}

export function decodeZdsHello(bytes: Uint8Array): ZdsHello {
  const obj = decode(zdsTypes().hello, bytes);
  return { version: Number(obj.version ?? 0) };
}
