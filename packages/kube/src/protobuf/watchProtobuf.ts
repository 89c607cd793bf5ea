import { decodeMessage, messageSchema, type MessageSchema } from './messageSchema.ts';
import { ProtobufError } from './wireReader.ts';

/**
 * Kubernetes' protobuf encoding (apimachinery `runtime/serializer/protobuf`): an object is the
 * magic `k8s\0` and a `runtime.Unknown` holding its kind and its own bytes; a watch stream is
 * `metav1.WatchEvent`s, each framed by a 4-byte big-endian length, whose `object.raw` is such an
 * object.
 */
export const PROTOBUF_MEDIA_TYPE = 'application/vnd.kubernetes.protobuf';

/** What a watch asks for: protobuf, or JSON from a server that has no protobuf for the resource. */
export const PROTOBUF_WATCH_ACCEPT = `${PROTOBUF_MEDIA_TYPE}, application/json`;

export function isProtobufContentType(contentType: string | undefined): boolean {
  return (contentType ?? '').split(';')[0]?.trim().toLowerCase() === PROTOBUF_MEDIA_TYPE;
}

/** The length prefix of a watch frame. */
export const FRAME_HEADER_BYTES = 4;

const MAGIC = Buffer.from('k8s\0', 'latin1');

const UNKNOWN = messageSchema({
  1: { name: 'typeMeta', kind: 'message', schema: messageSchema({ 2: { name: 'kind', kind: 'string' } }) },
  2: { name: 'raw', kind: 'bytes' },
  3: { name: 'contentEncoding', kind: 'string' },
});

const STATUS = messageSchema({
  3: { name: 'message', kind: 'string' },
  4: { name: 'reason', kind: 'string' },
  6: { name: 'code', kind: 'int' },
});

const WATCH_EVENT = messageSchema({
  1: { name: 'type', kind: 'string' },
  2: { name: 'object', kind: 'message', schema: messageSchema({ 1: { name: 'raw', kind: 'bytes' } }) },
});

/** `metav1.Status`, the fields an error is made of. */
export interface StatusFields {
  message?: string;
  reason?: string;
  code?: number;
}

/** An encoded object's kind and its own bytes. */
function unwrap(buf: Uint8Array): { kind: string; raw: Uint8Array } {
  if (buf.length < MAGIC.length || !MAGIC.equals(buf.subarray(0, MAGIC.length))) {
    throw new ProtobufError('object without the Kubernetes protobuf magic');
  }
  const u = decodeMessage(UNKNOWN, buf.subarray(MAGIC.length)) as {
    typeMeta?: { kind?: string };
    raw?: Uint8Array;
    contentEncoding?: string;
  };
  if (u.contentEncoding) throw new ProtobufError(`unsupported content encoding ${JSON.stringify(u.contentEncoding.slice(0, 40))}`);
  return { kind: u.typeMeta?.kind ?? '', raw: u.raw ?? new Uint8Array(0) };
}

/** A `Status` body (an error answer in protobuf); undefined when the body is not one. */
export function decodeStatusBody(buf: Uint8Array): StatusFields | undefined {
  try {
    const { kind, raw } = unwrap(buf);
    return kind === 'Status' ? (decodeMessage(STATUS, raw) as StatusFields) : undefined;
  } catch (err) {
    if (err instanceof ProtobufError) return undefined;
    throw err;
  }
}

/** What a watch's objects are: their kind and the fields kept of them. */
export interface ProtobufObjectType {
  readonly kind: string;
  readonly schema: MessageSchema;
}

export type ProtobufWatchEvent = { type: string; object: Record<string, unknown> } | { type: 'ERROR'; status: StatusFields };

/**
 * One frame of a protobuf watch stream (without its length prefix): the event's type and its
 * object, decoded by `schema` (only the schema's fields), or the `Status` of an ERROR event.
 * Throws {@link ProtobufError} on anything malformed.
 */
export function decodeWatchFrame(frame: Uint8Array, type: ProtobufObjectType): ProtobufWatchEvent {
  const event = decodeMessage(WATCH_EVENT, frame) as { type?: string; object?: { raw?: Uint8Array } };
  const eventType = event.type ?? '';
  const { kind, raw } = unwrap(event.object?.raw ?? new Uint8Array(0));
  if (eventType === 'ERROR') {
    if (kind !== 'Status') throw new ProtobufError(`ERROR event carrying a ${JSON.stringify(kind.slice(0, 40))}`);
    return { type: eventType, status: decodeMessage(STATUS, raw) as StatusFields };
  }
  if (kind !== type.kind) throw new ProtobufError(`${eventType} event carrying a ${JSON.stringify(kind.slice(0, 40))}, not a ${type.kind}`);
  return { type: eventType, object: decodeMessage(type.schema, raw) };
}
