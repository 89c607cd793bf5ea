/**
 * Strict IPv4/IPv6 address and CIDR parsing.
 *
 * Accepts exactly what Go's `net/netip` accepts for plain addresses (no zones, no leading zeros in
 * IPv4 octets or prefix lengths), because the upstream plugin validates annotations with
 * `netip.ParsePrefix`. Formatting follows `netip.Prefix.String()` (RFC 5952 for IPv6) so rule text
 * matches upstream byte for byte.
 */

import { formatIPv6Groups } from '@istio-cni/cni';

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

/** JSON-quoted item for error text, cut to 64 characters. */
export function quote(text: string): string {
  return text.length <= 64 ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, 64))}...`;
}

function parseIpv4Bytes(text: string): number[] | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  const bytes: number[] = [];
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return undefined;
    const n = Number(part);
    if (n > 255) return undefined;
    bytes.push(n);
  }
  return bytes;
}

function parseIpv6Groups(text: string): number[] | undefined {
  if (text.length === 0) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const parseSide = (side: string, allowV4Tail: boolean): number[] | undefined => {
    if (side === '') return [];
    const pieces = side.split(':');
    const groups: number[] = [];
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i] ?? '';
      if (allowV4Tail && i === pieces.length - 1 && piece.includes('.')) {
        const v4 = parseIpv4Bytes(piece);
        if (v4 === undefined) return undefined;
        groups.push(((v4[0] ?? 0) << 8) | (v4[1] ?? 0), ((v4[2] ?? 0) << 8) | (v4[3] ?? 0));
        continue;
      }
      if (!/^[0-9a-fA-F]{1,4}$/.test(piece)) return undefined;
      groups.push(parseInt(piece, 16));
    }
    return groups;
  };
  if (halves.length === 1) {
    const groups = parseSide(text, true);
    return groups !== undefined && groups.length === 8 ? groups : undefined;
  }
  const head = parseSide(halves[0] ?? '', false);
  const tail = parseSide(halves[1] ?? '', true);
  if (head === undefined || tail === undefined) return undefined;
  // `::` must stand for at least one zero group.
  if (head.length + tail.length > 7) return undefined;
  return [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

function groupsToBytes(groups: readonly number[]): number[] {
  return groups.flatMap((g) => [g >> 8, g & 0xff]);
}

function isV4Mapped(bytes: readonly number[]): boolean {
  return bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
}

function formatIpv6(bytes: readonly number[]): string {
  if (isV4Mapped(bytes)) return `::ffff:${bytes.slice(12).join('.')}`;
  return formatIPv6Groups(bytes);
}

/** Parses an IPv4 or IPv6 address; throws an Error naming the value when it is not one. */
export function parseIpAddress(text: string): IpAddress {
  if (typeof text !== 'string' || text.length === 0 || text.length > MAX_TEXT) {
    throw new Error(`invalid IP address ${quote(text)}`);
  }
  if (text.includes(':')) {
    const groups = parseIpv6Groups(text);
    if (groups === undefined) throw new Error(`invalid IP address ${quote(text)}`);
    const bytes = groupsToBytes(groups);
    return { family: 6, address: formatIpv6(bytes), text, bytes };
  }
  const bytes = parseIpv4Bytes(text);
  if (bytes === undefined) throw new Error(`invalid IP address ${quote(text)}`);
  return { family: 4, address: bytes.join('.'), text, bytes };
}

function isLoopbackBytes(family: IpFamily, bytes: readonly number[]): boolean {
  if (family === 4) return bytes[0] === 127;
  if (isV4Mapped(bytes)) return bytes[12] === 127;
  return bytes.slice(0, 15).every((b) => b === 0) && bytes[15] === 1;
}

/** Parses `address/prefix` strictly; throws an Error naming the value when it is not a CIDR. */
export function parseCidr(text: string): Cidr {
  if (typeof text !== 'string' || text.length > MAX_TEXT + 4) {
    throw new Error(`invalid CIDR ${quote(text)}`);
  }
  const slash = text.indexOf('/');
  if (slash < 0) throw new Error(`invalid CIDR ${quote(text)}: no '/'`);
  const addrText = text.slice(0, slash);
  const bitsText = text.slice(slash + 1);
  let ip: IpAddress;
  try {
    ip = parseIpAddress(addrText);
  } catch {
    throw new Error(`invalid CIDR ${quote(text)}: bad address`);
  }
  if (!/^(0|[1-9][0-9]{0,2})$/.test(bitsText)) {
    throw new Error(`invalid CIDR ${quote(text)}: bad prefix length`);
  }
  const prefixLength = Number(bitsText);
  if (prefixLength > (ip.family === 4 ? 32 : 128)) {
    throw new Error(`invalid CIDR ${quote(text)}: prefix length out of range`);
  }
  return {
    family: ip.family,
    address: ip.address,
    prefixLength,
    text: `${ip.address}/${prefixLength}`,
    isLoopback: isLoopbackBytes(ip.family, ip.bytes),
  };
}
