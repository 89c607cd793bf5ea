// IP and CIDR text handling, one parser with two faces:
// - Go's net.ParseIP, net.ParseCIDR and their String() forms, which the reference library uses for
//   every address in a result (parseIP, parseCIDR, formatIP, formatCIDR);
// - Go's net/netip, which upstream Istio validates annotations and flags with (parseIpAddress,
//   parseCidr): the same address grammar (no zones, no leading zeros in IPv4 octets), but IPv4
//   written in IPv6 form stays IPv6, prefix lengths take no leading zeros, and text prints as
//   netip.Prefix.String() does (RFC 5952 for IPv6).

/** 16-byte address (IPv4 stored IPv4-mapped, as Go does). */
export type IPBytes = Uint8Array;

function parseIPv4(s: string): number[] | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  const out: number[] = [];
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p) || (p.length > 1 && p.startsWith('0'))) return null;
    const n = Number(p);
    if (n > 255) return null;
    out.push(n);
  }
  return out;
}

function parseIPv6(s: string): number[] | null {
  let head = s;
  let tail = '';
  let ellipsis = false;
  const at = s.indexOf('::');
  if (at >= 0) {
    if (s.indexOf('::', at + 1) >= 0) return null;
    ellipsis = true;
    head = s.slice(0, at);
    tail = s.slice(at + 2);
  }
  const toBytes = (part: string, allowV4Tail: boolean): number[] | null => {
    if (part === '') return [];
    const groups = part.split(':');
    const bytes: number[] = [];
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i] ?? '';
      if (allowV4Tail && i === groups.length - 1 && g.includes('.')) {
        const v4 = parseIPv4(g);
        if (v4 === null) return null;
        bytes.push(...v4);
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      const n = parseInt(g, 16);
      bytes.push(n >> 8, n & 0xff);
    }
    return bytes;
  };
  const headBytes = toBytes(head, !ellipsis);
  const tailBytes = toBytes(tail, true);
  if (headBytes === null || tailBytes === null) return null;
  const total = headBytes.length + tailBytes.length;
  if (ellipsis) {
    if (total > 14) return null;
    return [...headBytes, ...new Array<number>(16 - total).fill(0), ...tailBytes];
  }
  return total === 16 ? headBytes : null;
}

/** Go's net.ParseIP: 16 bytes, or null when `s` is not an address (zones rejected). */
export function parseIP(s: string): IPBytes | null {
  if (s.includes(':')) {
    const v6 = parseIPv6(s);
    return v6 === null ? null : Uint8Array.from(v6);
  }
  const v4 = parseIPv4(s);
  if (v4 === null) return null;
  return Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...v4]);
}

/** Go's `ip.To4() != nil`: IPv4 or IPv4-mapped IPv6. */
export function isIPv4(ip: IPBytes): boolean {
  for (let i = 0; i < 10; i++) if (ip[i] !== 0) return false;
  return ip[10] === 0xff && ip[11] === 0xff;
}

/** Go's net.IP.String(). */
export function formatIP(ip: IPBytes): string {
  if (isIPv4(ip)) return Array.from(ip.subarray(12)).join('.');
  return formatIPv6Groups(ip);
}

/** 16 bytes as IPv6 hex groups, RFC 5952: the longest run (>= 2) of zero groups compressed, leftmost on ties. */
export function formatIPv6Groups(bytes: ArrayLike<number>): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return hex.slice(0, bestStart).join(':') + '::' + hex.slice(bestStart + bestLen).join(':');
}

/** A parsed CIDR: the full address (not masked, as the reference library keeps it) and prefix. */
export interface ParsedCidr {
  ip: IPBytes;
  /** Prefix length in bits of the address family it was written in. */
  prefix: number;
  /** Bits of the written family: 32 for dotted IPv4, 128 for IPv6 text. */
  bits: 32 | 128;
}

/** Go's types.ParseCIDR, or null when invalid. */
export function parseCIDR(s: string): ParsedCidr | null {
  const slash = s.indexOf('/');
  if (slash < 0) return null;
  const addr = s.slice(0, slash);
  const mask = s.slice(slash + 1);
  const ip = parseIP(addr);
  if (ip === null) return null;
  const bits = addr.includes(':') ? 128 : 32;
  if (!/^[0-9]+$/.test(mask)) return null;
  const prefix = Number(mask);
  if (prefix > bits) return null;
  return { ip, prefix, bits };
}

/** Go's (*net.IPNet).String() for a CIDR parsed by {@link parseCIDR}. */
export function formatCIDR(cidr: ParsedCidr): string {
  if (isIPv4(cidr.ip)) {
    const prefix = cidr.bits === 32 ? cidr.prefix : Math.max(0, cidr.prefix - 96);
    return `${formatIP(cidr.ip)}/${prefix}`;
  }
  return `${formatIP(cidr.ip)}/${cidr.prefix}`;
}

/** Address family in `netip` terms: 6 for any address written with colons, IPv4-mapped included. */
export type IpFamily = 4 | 6;

export interface IpAddress {
  readonly family: IpFamily;
  /** Canonical text (`netip.Addr.String()`), e.g. `2001:db8::1`. */
  readonly address: string;
  /** The validated input text; upstream writes DNS server addresses verbatim (`::127.0.0.53`). */
  readonly text: string;
  /** Parsed bytes: 4 for IPv4, 16 for IPv6. */
  readonly bytes: readonly number[];
}

export interface Cidr {
  readonly family: IpFamily;
  /** Canonical address text; the host bits are kept, as `netip.Prefix` does (`127.0.0.1/8`). */
  readonly address: string;
  readonly prefixLength: number;
  /** `address/prefixLength`, as `netip.Prefix.String()` prints it. */
  readonly text: string;
  /** True when the address is loopback (`127.0.0.0/8`, `::1`, or a v4-mapped loopback). */
  readonly isLoopback: boolean;
}

const MAX_TEXT = 64;

/** JSON-quoted value for an error message, cut to 64 characters. */
export function quoteForError(text: string): string {
  return text.length <= MAX_TEXT ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, MAX_TEXT))}...`;
}

/** `netip.Addr.String()` of 16 bytes written as IPv6: `::ffff:a.b.c.d` for IPv4-mapped. */
function formatIpv6Netip(bytes: IPBytes): string {
  if (isIPv4(bytes)) return `::ffff:${Array.from(bytes.subarray(12)).join('.')}`;
  return formatIPv6Groups(bytes);
}

/** `netip.ParseAddr` without zones; throws an Error naming the value when it is not an address. */
export function parseIpAddress(text: string): IpAddress {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_TEXT) {
    throw new Error(`invalid IP address ${quoteForError(text)}`);
  }
  const ip = parseIP(text);
  if (ip === null) throw new Error(`invalid IP address ${quoteForError(text)}`);
  if (text.includes(':')) return { family: 6, address: formatIpv6Netip(ip), text, bytes: Array.from(ip) };
  const bytes = Array.from(ip.subarray(12));
  return { family: 4, address: bytes.join('.'), text, bytes };
}

function isLoopbackBytes(family: IpFamily, bytes: readonly number[]): boolean {
  if (family === 4) return bytes[0] === 127;
  if (isIPv4(Uint8Array.from(bytes))) return bytes[12] === 127;
  return bytes.slice(0, 15).every((b) => b === 0) && bytes[15] === 1;
}

/** `netip.ParsePrefix`: `address/prefix` strictly; throws an Error naming the value when it is not a CIDR. */
export function parseCidr(text: string): Cidr {
  if (typeof text !== 'string' || text.length > MAX_TEXT + 4) {
    throw new Error(`invalid CIDR ${quoteForError(text)}`);
  }
  const slash = text.indexOf('/');
  if (slash < 0) throw new Error(`invalid CIDR ${quoteForError(text)}: no '/'`);
  const addrText = text.slice(0, slash);
  const bitsText = text.slice(slash + 1);
  let ip: IpAddress;
  try {
    ip = parseIpAddress(addrText);
  } catch {
    throw new Error(`invalid CIDR ${quoteForError(text)}: bad address`);
  }
  if (!/^(0|[1-9][0-9]{0,2})$/.test(bitsText)) {
    throw new Error(`invalid CIDR ${quoteForError(text)}: bad prefix length`);
  }
  const prefixLength = Number(bitsText);
  if (prefixLength > (ip.family === 4 ? 32 : 128)) {
    throw new Error(`invalid CIDR ${quoteForError(text)}: prefix length out of range`);
  }
  return {
    family: ip.family,
    address: ip.address,
    prefixLength,
    text: `${ip.address}/${prefixLength}`,
    isLoopback: isLoopbackBytes(ip.family, ip.bytes),
  };
}
