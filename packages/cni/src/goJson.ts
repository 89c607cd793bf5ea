// JSON reading and writing with the observable behaviour of Go's encoding/json,
// because the reference CNI library is Go: runtimes see its syntax-error texts
// and its MarshalIndent layout, and plugins are expected to match them.

import { goQuote } from './goText.ts';

/** Go's encoding/json nesting limit. */
const MAX_NESTING_DEPTH = 10000;

const enum_ = {
  beginValue: 0,
  beginValueOrEmpty: 1,
  beginStringOrEmpty: 2,
  beginString: 3,
  endValue: 4,
  endTop: 5,
  inString: 6,
  inStringEsc: 7,
  inStringEscU: 8,
  neg: 9,
  one: 10,
  zero: 11,
  dot: 12,
  dot0: 13,
  e: 14,
  eSign: 15,
  e0: 16,
  literal: 17,
} as const;

const OBJECT_KEY = 0;
const OBJECT_VALUE = 1;
const ARRAY_VALUE = 2;

function quoteChar(c: number): string {
  if (c === 0x27) return "'\\''";
  if (c === 0x22) return "'\"'";
  const q = goQuote(String.fromCharCode(c));
  return "'" + q.slice(1, -1) + "'";
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHex(c: number): boolean {
  return isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
}

/**
 * Go's `checkValid`: scans the bytes and returns the SyntaxError text Go's
 * json.Unmarshal would report, or null when the input is one valid JSON value.
 */
export function goJsonSyntaxError(data: Uint8Array): string | null {
  const stack: number[] = [];
  let state: number = enum_.beginValue;
  let literalRest = '';
  let literalName = '';
  let escURemaining = 0;
  const err = (c: number, context: string): string => `invalid character ${quoteChar(c)} ${context}`;

  // Returns an error text, or null to continue; may re-dispatch the same byte.
  const step = (c: number): string | null => {
    for (;;) {
      switch (state) {
        case enum_.beginValueOrEmpty:
          if (isSpace(c)) return null;
          if (c === 0x5d) {
            state = enum_.endValue;
            continue;
          }
          state = enum_.beginValue;
          continue;
        case enum_.beginValue:
          if (isSpace(c)) return null;
          switch (c) {
            case 0x7b:
              stack.push(OBJECT_KEY);
              if (stack.length > MAX_NESTING_DEPTH) return err(c, 'exceeded max depth');
              state = enum_.beginStringOrEmpty;
              return null;
            case 0x5b:
              stack.push(ARRAY_VALUE);
              if (stack.length > MAX_NESTING_DEPTH) return err(c, 'exceeded max depth');
              state = enum_.beginValueOrEmpty;
              return null;
            case 0x22:
              state = enum_.inString;
              return null;
            case 0x2d:
              state = enum_.neg;
              return null;
            case 0x30:
              state = enum_.zero;
              return null;
            case 0x74:
              state = enum_.literal;
              literalName = 'true';
              literalRest = 'rue';
              return null;
            case 0x66:
              state = enum_.literal;
              literalName = 'false';
              literalRest = 'alse';
              return null;
            case 0x6e:
              state = enum_.literal;
              literalName = 'null';
              literalRest = 'ull';
              return null;
          }
          if (c >= 0x31 && c <= 0x39) {
            state = enum_.one;
            return null;
          }
          return err(c, 'looking for beginning of value');
        case enum_.beginStringOrEmpty:
          if (isSpace(c)) return null;
          if (c === 0x7d) {
            stack[stack.length - 1] = OBJECT_VALUE;
            state = enum_.endValue;
            continue;
          }
          state = enum_.beginString;
          continue;
        case enum_.beginString:
          if (isSpace(c)) return null;
          if (c === 0x22) {
            state = enum_.inString;
            return null;
          }
          return err(c, 'looking for beginning of object key string');
        case enum_.endValue: {
          if (stack.length === 0) {
            state = enum_.endTop;
            continue;
          }
          if (isSpace(c)) return null;
          const top = stack[stack.length - 1];
          if (top === OBJECT_KEY) {
            if (c === 0x3a) {
              stack[stack.length - 1] = OBJECT_VALUE;
              state = enum_.beginValue;
              return null;
            }
            return err(c, 'after object key');
          }
          if (top === OBJECT_VALUE) {
            if (c === 0x2c) {
              stack[stack.length - 1] = OBJECT_KEY;
              state = enum_.beginString;
              return null;
            }
            if (c === 0x7d) {
              stack.pop();
              return null;
            }
            return err(c, 'after object key:value pair');
          }
          if (c === 0x2c) {
            state = enum_.beginValue;
            return null;
          }
          if (c === 0x5d) {
            stack.pop();
            return null;
          }
          return err(c, 'after array element');
        }
        case enum_.endTop:
          if (!isSpace(c)) return err(c, 'after top-level value');
          return null;
        case enum_.inString:
          if (c === 0x22) {
            state = enum_.endValue;
            return null;
          }
          if (c === 0x5c) {
            state = enum_.inStringEsc;
            return null;
          }
          if (c < 0x20) return err(c, 'in string literal');
          return null;
        case enum_.inStringEsc:
          if ([0x62, 0x66, 0x6e, 0x72, 0x74, 0x5c, 0x2f, 0x22].includes(c)) {
            state = enum_.inString;
            return null;
          }
          if (c === 0x75) {
            state = enum_.inStringEscU;
            escURemaining = 4;
            return null;
          }
          return err(c, 'in string escape code');
        case enum_.inStringEscU:
          if (!isHex(c)) return err(c, 'in \\u hexadecimal character escape');
          escURemaining--;
          if (escURemaining === 0) state = enum_.inString;
          return null;
        case enum_.neg:
          if (c === 0x30) {
            state = enum_.zero;
            return null;
          }
          if (c >= 0x31 && c <= 0x39) {
            state = enum_.one;
            return null;
          }
          return err(c, 'in numeric literal');
        case enum_.one:
          if (isDigit(c)) return null;
          state = enum_.zero;
          continue;
        case enum_.zero:
          if (c === 0x2e) {
            state = enum_.dot;
            return null;
          }
          if (c === 0x65 || c === 0x45) {
            state = enum_.e;
            return null;
          }
          state = enum_.endValue;
          continue;
        case enum_.dot:
          if (isDigit(c)) {
            state = enum_.dot0;
            return null;
          }
          return err(c, 'after decimal point in numeric literal');
        case enum_.dot0:
          if (isDigit(c)) return null;
          if (c === 0x65 || c === 0x45) {
            state = enum_.e;
            return null;
          }
          state = enum_.endValue;
          continue;
        case enum_.e:
          if (c === 0x2b || c === 0x2d) {
            state = enum_.eSign;
            return null;
          }
          state = enum_.eSign;
          continue;
        case enum_.eSign:
          if (isDigit(c)) {
            state = enum_.e0;
            return null;
          }
          return err(c, 'in exponent of numeric literal');
        case enum_.e0:
          if (isDigit(c)) return null;
          state = enum_.endValue;
          continue;
        case enum_.literal: {
          const want = literalRest.charCodeAt(0);
          if (c !== want) {
            return err(c, `in literal ${literalName} (expecting ${quoteChar(want)})`);
          }
          literalRest = literalRest.slice(1);
          if (literalRest === '') state = enum_.endValue;
          return null;
        }
        default:
          return null;
      }
    }
  };

  for (let i = 0; i < data.length; i++) {
    const e = step(data[i] ?? 0);
    if (e !== null) return e;
  }
  // Go's scanner.eof(): a final space completes numbers, then the value must be done.
  if (state === enum_.endTop) return null;
  const e = step(0x20);
  if (e !== null) return e;
  if (state === enum_.endTop) return null;
  return 'unexpected end of JSON input';
}

/** Result of {@link goJsonParse}: the parsed value or Go's syntax-error text. */
export type GoJsonParsed = { ok: true; value: unknown } | { ok: false; error: string };

/**
 * UTF-8 text of `bytes`, invalid sequences replaced by U+FFFD as Go does, a leading BOM kept (so
 * JSON.parse refuses it, as Go does). Buffer's decoder, unlike TextDecoder, needs no ICU set-up:
 * this runs once per plugin process.
 */
function utf8(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

/** Go's scanner refuses nesting deeper than this; an input shorter than it cannot nest that deep. */
const MAX_NESTING = 10000;

/** Parses bytes as JSON, reporting syntax errors with Go's wording. */
export function goJsonParse(data: Uint8Array | string): GoJsonParsed {
  // Fast path for the plugin's hot path: JSON.parse accepts exactly what Go's scanner accepts,
  // except nesting deeper than MAX_NESTING, which a short input cannot have. The byte-by-byte
  // port of Go's scanner only runs to word an error the way Go does.
  if (data.length <= MAX_NESTING) {
    try {
      const text = typeof data === 'string' ? data : utf8(data);
      return { ok: true, value: JSON.parse(text) as unknown };
    } catch {
      // fall through to the scanner for Go's error text
    }
  }
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const syntax = goJsonSyntaxError(bytes);
  if (syntax !== null) return { ok: false, error: syntax };
  const text = typeof data === 'string' ? data : utf8(bytes);
  return { ok: true, value: JSON.parse(text) as unknown };
}

/** The word Go uses for a JSON value's kind in UnmarshalTypeError. */
export function goJsonKind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'object') return 'object';
  if (typeof value === 'boolean') return 'bool';
  return typeof value;
}

// Go matches struct fields to JSON keys case-insensitively (with a few
// Unicode folds) when no exact match exists; the last matching key wins.
const SPECIAL_FOLDS: Record<string, string> = { '\u212a': 'K', '\u017f': 'S', '\u0130': 'I', '\u0131': 'I' };

function foldName(s: string): string {
  let out = '';
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (cp < 0x80) out += ch.toUpperCase();
    else out += SPECIAL_FOLDS[ch] ?? ch;
  }
  return out;
}

/** Every [key, value] of `obj` whose key Go would decode into the field `name`, in order. */
export function goFieldEntries(obj: Record<string, unknown>, name: string): [string, unknown][] {
  const folded = foldName(name);
  return Object.entries(obj).filter(([k]) => k === name || foldName(k) === folded);
}

/**
 * Decodes one `string` struct field like Go: null keeps the previous value, a
 * non-string records a type error (first one wins) and decoding continues.
 */
export function goStringField(obj: Record<string, unknown>, name: string, structName: string): { value: string; error?: string } {
  let value = '';
  let error: string | undefined;
  for (const [, v] of goFieldEntries(obj, name)) {
    if (v === null) continue;
    if (typeof v === 'string') value = v;
    else error ??= `json: cannot unmarshal ${goJsonKind(v)} into Go struct field ${structName}.${name} of type string`;
  }
  return error === undefined ? { value } : { value, error };
}

function escapeString(s: string): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i] as string;
    const c = s.charCodeAt(i);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20 || ch === '<' || ch === '>' || ch === '&' || c === 0x2028 || c === 0x2029) {
      out += '\\u' + c.toString(16).padStart(4, '0');
    } else if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        out += ch + s[i + 1];
        i++;
      } else out += '\\ufffd';
    } else if (c >= 0xdc00 && c <= 0xdfff) out += '\\ufffd';
    else out += ch;
  }
  return out + '"';
}

/** Go's map key order: by UTF-8 bytes. */
function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

function encode(value: unknown, indent: string, level: number, sortKeys: boolean): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return escapeString(value);
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  const pad = indent === '' ? '' : '\n' + indent.repeat(level + 1);
  const end = indent === '' ? '' : '\n' + indent.repeat(level);
  const colon = indent === '' ? ':' : ': ';
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return '[' + value.map((v) => pad + encode(v, indent, level + 1, sortKeys)).join(',') + end + ']';
  }
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  if (sortKeys) entries.sort(([a], [b]) => byteOrder(a, b));
  return '{' + entries.map(([k, v]) => pad + escapeString(k) + colon + encode(v, indent, level + 1, sortKeys)).join(',') + end + '}';
}

export interface GoMarshalIndentOptions {
  /** One level of indentation; Go's `MarshalIndent(v, "", indent)`. Four spaces unless given. */
  indent?: string;
  /** Object keys in UTF-8 byte order at every depth (how Go encodes a map); else insertion order (a struct). */
  sortKeys?: boolean;
}

/** Go's `json.MarshalIndent(v, "", "    ")` for plain JSON data; keys keep insertion order unless sorted. */
export function goMarshalIndent(value: unknown, options: GoMarshalIndentOptions = {}): string {
  return encode(value, options.indent ?? '    ', 0, options.sortKeys ?? false);
}

/**
 * A CNI config file as Go programs write one: `json.MarshalIndent(v, "", "  ")` and a final newline.
 * `sorted` for data decoded into a Go map (a conflist edited as `map[string]any`), `ordered` for a
 * Go struct (fields in declaration order).
 */
export function goConfigFileText(value: unknown, keys: 'sorted' | 'ordered'): string {
  return goMarshalIndent(value, { indent: '  ', sortKeys: keys === 'sorted' }) + '\n';
}

/** Go's `json.Marshal` for plain JSON data; keys keep insertion order. */
export function goMarshal(value: unknown): string {
  return encode(value, '', 0, false);
}

/** Plain JSON data, as `JSON.parse` returns it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Parses JSON into plain data (JavaScript's syntax-error text). `__proto__` keys become ordinary own
 * properties (JSON.parse does that already); the encoder only reads own keys, so such a key
 * round-trips unchanged.
 */
export function parseJson(text: string): JsonValue {
  return JSON.parse(text) as JsonValue;
}
