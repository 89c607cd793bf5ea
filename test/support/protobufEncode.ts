/**
 * A minimal protobuf writer for tests: enough to build the messages a Kubernetes API server
 * sends (varints, length-delimited fields, the `k8s\0` envelope, watch frames), including
 * malformed ones.
 */

export function varint(n: number | bigint): Buffer {
  let v = BigInt.asUintN(64, BigInt(n));
  const out: number[] = [];
  do {
    const low = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v > 0n ? low | 0x80 : low);
  } while (v > 0n);
  return Buffer.from(out);
}

export type Field = [number, number | bigint | boolean | string | Uint8Array | Field[]];

/** A message of distinct fields by number (`{ 1: 'name', 2: fields({…}) }`), in ascending order. */
export function fields(byNumber: Record<number, Field[1]>): Field[] {
  return Object.entries(byNumber).map(([n, v]) => [Number(n), v]);
}

/** Encodes fields in the order given: numbers and booleans as varints, the rest length-delimited. */
export function message(fields: readonly Field[]): Buffer {
  const parts: Buffer[] = [];
  for (const [n, v] of fields) {
    if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') {
      parts.push(varint(n * 8), varint(typeof v === 'boolean' ? Number(v) : v));
      continue;
    }
    const bytes = typeof v === 'string' ? Buffer.from(v, 'utf8') : Array.isArray(v) ? message(v) : Buffer.from(v);
    parts.push(varint(n * 8 + 2), varint(bytes.length), bytes);
  }
  return Buffer.concat(parts);
}

/** An object as the API server encodes it: `k8s\0` + runtime.Unknown{typeMeta, raw}. */
export function envelope(kind: string, raw: Uint8Array, apiVersion = 'v1'): Buffer {
  return Buffer.concat([
    Buffer.from('k8s\0', 'latin1'),
    message([
      [
        1,
        [
          [1, apiVersion],
          [2, kind],
        ],
      ],
      [2, raw],
    ]),
  ]);
}

/** One watch event as a length-prefixed frame of a `stream=watch` response. */
export function watchFrame(type: string, object: Uint8Array): Buffer {
  const event = message([
    [1, type],
    [2, [[1, object]]],
  ]);
  const header = Buffer.alloc(4);
  header.writeUInt32BE(event.length);
  return Buffer.concat([header, event]);
}
