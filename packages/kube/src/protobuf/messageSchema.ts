import { ProtobufError, WIRE_LEN, WIRE_VARINT, WireReader } from './wireReader.ts';

/**
 * The fields of a Kubernetes object that a consumer keeps, with their protobuf numbers: one table
 * from which both the protobuf decoder and the JSON projection take their fields, so an object
 * arrives in the same shape whichever encoding the API server sent. Fields not in the table are
 * skipped without being decoded.
 */
export type FieldSchema =
  | {
      readonly name: string;
      readonly kind: 'string' | 'bool' | 'int';
      readonly repeated?: boolean;
      /**
       * Kept when zero, false or empty. Go's JSON omits a zero `omitempty` field and its protobuf
       * sends it anyway; a pointer field (`*int64 runAsUser`) is sent only when set, and a field
       * without `omitempty` (`exitCode`) is in the JSON even when zero: both keep their zero.
       */
      readonly keepZero?: boolean;
    }
  /** `metav1.Time`: RFC 3339 to the second, as its JSON; the zero time is left out. */
  | { readonly name: string; readonly kind: 'time' }
  /** Raw bytes (a view into the message), for envelopes; never read from JSON. */
  | { readonly name: string; readonly kind: 'bytes' }
  /** `map<string, string>` (labels, annotations). */
  | { readonly name: string; readonly kind: 'map' }
  | { readonly name: string; readonly kind: 'message'; readonly schema: MessageSchema; readonly repeated?: boolean };

export interface MessageSchema {
  readonly byNumber: ReadonlyMap<number, FieldSchema>;
  readonly fields: readonly FieldSchema[];
}

export function messageSchema(fields: Readonly<Record<number, FieldSchema>>): MessageSchema {
  const byNumber = new Map(Object.entries(fields).map(([n, f]) => [Number(n), f] as const));
  return { byNumber, fields: [...byNumber.values()] };
}

type Decoded = Record<string, unknown>;

/** Sets a property even when its name is `__proto__` (a map key is data). */
function put(o: Decoded, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

function push(o: Decoded, key: string, value: unknown): void {
  const list = o[key];
  if (Array.isArray(list)) list.push(value);
  else put(o, key, [value]);
}

const TIME = messageSchema({ 1: { name: 'seconds', kind: 'int' }, 2: { name: 'nanos', kind: 'int' } });
const MAP_ENTRY = messageSchema({
  1: { name: 'key', kind: 'string', keepZero: true },
  2: { name: 'value', kind: 'string', keepZero: true },
});

/** Unix seconds as `metav1.Time` writes them in JSON: `2006-01-02T15:04:05Z`. */
function rfc3339(seconds: number): string {
  const d = new Date(seconds * 1000);
  if (Number.isNaN(d.getTime())) throw new ProtobufError(`time ${seconds} out of range`);
  const iso = d.toISOString();
  if (!/^\d{4}-/.test(iso)) throw new ProtobufError(`time ${seconds} out of range`);
  return `${iso.slice(0, 19)}Z`;
}

function expectWire(field: FieldSchema, wire: number, want: number): void {
  if (wire !== want) throw new ProtobufError(`field ${field.name}: wire type ${wire}, expected ${want}`);
}

/** Decodes the fields of `schema` from one protobuf message; the others are skipped. */
export function decodeMessage(schema: MessageSchema, buf: Uint8Array): Decoded {
  const out: Decoded = {};
  const r = new WireReader(buf);
  while (!r.done()) {
    const { field: number, wire } = r.tag();
    const field = schema.byNumber.get(number);
    if (field === undefined) {
      r.skip(wire);
      continue;
    }
    switch (field.kind) {
      case 'string': {
        expectWire(field, wire, WIRE_LEN);
        const v = r.string();
        if (field.repeated) push(out, field.name, v);
        else if (v !== '' || field.keepZero) put(out, field.name, v);
        break;
      }
      case 'bool': {
        expectWire(field, wire, WIRE_VARINT);
        const v = r.bool();
        if (v || field.keepZero) put(out, field.name, v);
        break;
      }
      case 'int': {
        expectWire(field, wire, WIRE_VARINT);
        const v = r.varint();
        if (v !== 0 || field.keepZero) put(out, field.name, v);
        break;
      }
      case 'time': {
        expectWire(field, wire, WIRE_LEN);
        const t = decodeMessage(TIME, r.bytes()) as { seconds?: number; nanos?: number };
        if ((t.seconds ?? 0) !== 0 || (t.nanos ?? 0) !== 0) put(out, field.name, rfc3339(t.seconds ?? 0));
        break;
      }
      case 'bytes':
        expectWire(field, wire, WIRE_LEN);
        put(out, field.name, r.bytes());
        break;
      case 'map': {
        expectWire(field, wire, WIRE_LEN);
        const entry = decodeMessage(MAP_ENTRY, r.bytes()) as { key?: string; value?: string };
        let map = out[field.name] as Decoded | undefined;
        if (map === undefined) {
          map = {};
          put(out, field.name, map);
        }
        put(map, entry.key ?? '', entry.value ?? '');
        break;
      }
      case 'message': {
        expectWire(field, wire, WIRE_LEN);
        const v = decodeMessage(field.schema, r.bytes());
        if (field.repeated) push(out, field.name, v);
        else put(out, field.name, v);
        break;
      }
    }
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function scalarOf(field: FieldSchema & { kind: 'string' | 'bool' | 'int' }, v: unknown): unknown {
  if (field.kind === 'string') return typeof v === 'string' ? v : undefined;
  if (field.kind === 'bool') return typeof v === 'boolean' ? v : undefined;
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function isZero(v: unknown): boolean {
  return v === '' || v === false || v === 0;
}

/**
 * The fields of `schema` picked from an object decoded from JSON, by the same rules as
 * {@link decodeMessage}: a value of the wrong type is left out, and so is a zero the protobuf
 * decoder would not keep.
 */
export function projectJson(schema: MessageSchema, value: unknown): Decoded {
  const out: Decoded = {};
  if (!isRecord(value)) return out;
  for (const field of schema.fields) {
    const v = value[field.name];
    if (v === undefined || v === null) continue;
    switch (field.kind) {
      case 'string':
      case 'bool':
      case 'int': {
        if (field.repeated) {
          const list = Array.isArray(v) ? v.map((e) => scalarOf(field, e)).filter((e) => e !== undefined) : [];
          if (list.length > 0) put(out, field.name, list);
          break;
        }
        const s = scalarOf(field, v);
        if (s !== undefined && (field.keepZero || !isZero(s))) put(out, field.name, s);
        break;
      }
      case 'time':
        if (typeof v === 'string') put(out, field.name, v);
        break;
      case 'bytes':
        break;
      case 'map':
        if (isRecord(v)) {
          const map: Decoded = {};
          for (const [k, e] of Object.entries(v)) if (typeof e === 'string') put(map, k, e);
          if (Object.keys(map).length > 0) put(out, field.name, map);
        }
        break;
      case 'message':
        if (field.repeated) {
          const list = Array.isArray(v) ? v.filter(isRecord).map((e) => projectJson(field.schema, e)) : [];
          if (list.length > 0) put(out, field.name, list);
        } else if (isRecord(v)) put(out, field.name, projectJson(field.schema, v));
        break;
    }
  }
  return out;
}
