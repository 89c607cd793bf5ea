/**
 * JSON text exactly as upstream's Go encoder writes CNI configs (testdata/upstream/inputs.md §5.1): 2-space indent,
 * `": "` after keys, `{}`/`[]` for empty containers, `<`, `>`, `&`, U+2028 and U+2029 escaped,
 * and a final newline. `marshalSorted` sorts object keys by byte order at every depth (Go map
 * encoding); `marshalOrdered` keeps insertion order (Go struct encoding).
 */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

const GO_ESCAPES: Record<string, string> = {
  '<': '\\u003c',
  '>': '\\u003e',
  '&': '\\u0026',
  '\u2028': '\\u2028',
  '\u2029': '\\u2029',
};

function quote(s: string): string {
  return JSON.stringify(s).replace(/[<>&\u2028\u2029]/g, (c) => GO_ESCAPES[c] ?? c);
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function encode(v: JsonValue, indent: string, sorted: boolean): string {
  if (v === null || typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return JSON.stringify(v);
  if (typeof v === 'string') return quote(v);
  const inner = indent + '  ';
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    return `[\n${v.map((x) => inner + encode(x, inner, sorted)).join(',\n')}\n${indent}]`;
  }
  const keys = Object.keys(v);
  if (keys.length === 0) return '{}';
  if (sorted) keys.sort(byteOrder);
  const parts = keys.map((k) => `${inner}${quote(k)}: ${encode(v[k] as JsonValue, inner, sorted)}`);
  return `{\n${parts.join(',\n')}\n${indent}}`;
}

export function marshalSorted(v: JsonValue): string {
  return encode(v, '', true) + '\n';
}

export function marshalOrdered(v: JsonValue): string {
  return encode(v, '', false) + '\n';
}

export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Parses JSON into plain data. `__proto__` keys become ordinary own properties (JSON.parse does
 * that already); the encoder above only reads own keys, so such a key round-trips unchanged.
 */
export function parseJson(text: string): JsonValue {
  return JSON.parse(text) as JsonValue;
}
