// Go's formatting verbs reproduced where the reference library puts them in
// error messages, so our messages match it byte for byte.

const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

const NAMED_ESCAPES: Record<string, string> = {
  '\x07': '\\a',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
  '\v': '\\v',
};

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}

/** Go's `strconv.Quote` (what `%q` prints for a string). */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (ch === '"' || ch === '\\') out += '\\' + ch;
    else if (PRINTABLE.test(ch)) out += ch;
    else if (NAMED_ESCAPES[ch] !== undefined) out += NAMED_ESCAPES[ch];
    else if (cp < 0x20 || cp === 0x7f) out += '\\x' + hex(cp, 2);
    else if (cp >= 0xd800 && cp <= 0xdfff) out += '\\ufffd';
    else if (cp < 0x10000) out += '\\u' + hex(cp, 4);
    else out += '\\U' + hex(cp, 8);
  }
  return out + '"';
}

/** `%q` of a `[]string`: `["a" "b"]`. */
export function goQuoteList(list: readonly string[]): string {
  return '[' + list.map(goQuote).join(' ') + ']';
}

/** `%v` of a `[]string`: `[a b]`. */
export function goList(list: readonly string[]): string {
  return '[' + list.join(' ') + ']';
}

const INT64_MAX = 9223372036854775807n;

/** Go's `strconv.Atoi`, returning the error text Go would produce. */
export function goAtoi(s: string): { value: number } | { error: string } {
  if (!/^[+-]?[0-9]+$/.test(s)) {
    return { error: `strconv.Atoi: parsing ${goQuote(s)}: invalid syntax` };
  }
  const big = BigInt(s);
  if (big > INT64_MAX || big < -INT64_MAX - 1n) {
    return { error: `strconv.Atoi: parsing ${goQuote(s)}: value out of range` };
  }
  return { value: Number(big) };
}
