import { parseCidr, parseIpAddress, quoteForError } from '@istio-cni/cni';
import type { Cidr, IpAddress } from '@istio-cni/cni';

/**
 * Parsers for the comma-list values that end up in rule text. Each throws a plain Error naming the
 * bad item; callers wrap it with the setting's name. Nothing here passes input text through: every
 * result is a number, a re-formatted address, or a name checked against a closed character set.
 */

/** Longest list accepted; far beyond any real pod, small enough to bound rule-set size. */
export const MAX_LIST_ITEMS = 256;
/** Longest raw value accepted, before splitting. */
export const MAX_VALUE_LENGTH = 8192;

export type Wildcard = '*';

function checkLength(value: string): void {
  if (typeof value !== 'string') throw new Error('value is not a string');
  if (value.length > MAX_VALUE_LENGTH) throw new Error(`value longer than ${MAX_VALUE_LENGTH} characters`);
}

function splitItems(value: string): string[] {
  const items = value.split(',');
  if (items.length > MAX_LIST_ITEMS) throw new Error(`more than ${MAX_LIST_ITEMS} items`);
  return items;
}

/** One TCP/UDP port: decimal digits only, 0–65535, surrounding spaces allowed. */
export function parsePort(text: string): number {
  const trimmed = text.replace(/^[ \t]+|[ \t]+$/g, '');
  if (!/^[0-9]{1,5}$/.test(trimmed)) throw new Error(`invalid port ${quoteForError(text)}`);
  const port = Number(trimmed);
  if (port > 65535) throw new Error(`port ${quoteForError(text)} out of range 0-65535`);
  return port;
}

/**
 * Comma-separated ports as the plugin reads annotations: the whole value and each item are trimmed,
 * an empty value is an empty list, an empty item is an error.
 */
export function parsePortList(value: string): number[] {
  checkLength(value);
  const trimmed = value.replace(/^[ \t]+|[ \t]+$/g, '');
  if (trimmed === '') return [];
  return splitItems(trimmed).map(parsePort);
}

export function parsePortListOrWildcard(value: string): number[] | Wildcard {
  checkLength(value);
  if (value === '*') return '*';
  return parsePortList(value);
}

/** Comma-separated CIDRs, no spaces; an empty value is an empty list. */
export function parseCidrList(value: string): Cidr[] {
  checkLength(value);
  if (value === '') return [];
  return splitItems(value).map((item) => parseCidr(item));
}

export function parseCidrListOrWildcard(value: string): Cidr[] | Wildcard {
  checkLength(value);
  if (value === '*') return '*';
  return parseCidrList(value);
}

/** Comma-separated IP addresses (DNS servers). */
export function parseIpList(value: string): IpAddress[] {
  checkLength(value);
  if (value === '') return [];
  return splitItems(value).map((item) => parseIpAddress(item));
}

/** Longest Linux interface name (IFNAMSIZ less the terminating NUL). */
export const MAX_INTERFACE_NAME_LENGTH = 15;

/**
 * A Linux interface name as upstream's `ValidateInterfaceNames` (pkg/util/net/ip.go) accepts it:
 * 1–15 characters, a letter first, then letters, digits, `_`, `.` or `-`. So never `.`/`..`, `/`,
 * `:`, `@` or whitespace: the kernel's `dev_valid_name` and more, as the name is written unquoted
 * into iptables-restore and nft scripts.
 */
export function parseInterfaceName(text: string): string {
  if (text.length === 0) throw new Error('empty interface name');
  if (text.length > MAX_INTERFACE_NAME_LENGTH) {
    throw new Error(`invalid interface name ${quoteForError(text)}: too long (max ${MAX_INTERFACE_NAME_LENGTH} characters)`);
  }
  if (!/^[A-Za-z][A-Za-z0-9_.-]*$/.test(text)) {
    throw new Error(`invalid interface name ${quoteForError(text)}: want a letter first, then letters, digits, '_', '.' or '-'`);
  }
  return text;
}

/**
 * Comma-separated interface names, as upstream validates the interface annotations: an empty value
 * is an empty list, each item is trimmed, and an empty item (`eth0,,eth1`, a trailing comma) is an
 * error.
 */
export function parseInterfaceList(value: string): string[] {
  checkLength(value);
  if (value === '') return [];
  return splitItems(value).map((item) => parseInterfaceName(goTrimSpace(item)));
}

/** Go's `strings.TrimSpace`: `unicode.IsSpace` differs from JS `trim` (U+0085 yes, U+FEFF no). */
function goTrimSpace(text: string): string {
  return text.replace(
    /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g,
    '',
  );
}

/** A numeric user or group id (what `--uid-owner`/`skuid` receive). */
export function parseOwnerId(text: string): number {
  if (!/^(0|[1-9][0-9]{0,9})$/.test(text)) throw new Error(`invalid id ${quoteForError(text)}`);
  const id = Number(text);
  if (id > 0xffffffff) throw new Error(`id ${quoteForError(text)} out of range`);
  return id;
}

/** Comma-separated numeric ids; empty items are dropped (upstream `config.Split`). */
export function parseOwnerIdList(value: string): number[] {
  checkLength(value);
  return splitItems(value)
    .filter((item) => item !== '')
    .map(parseOwnerId);
}

/** A group given by id or by POSIX-ish name (`java`, `ftp`, `202`). */
export function parseGroupName(text: string): string {
  if (/^[0-9]+$/.test(text)) return String(parseOwnerId(text));
  if (!/^[A-Za-z_][A-Za-z0-9_.-]{0,31}$/.test(text)) throw new Error(`invalid group ${quoteForError(text)}`);
  return text;
}

/** Comma-separated groups; empty items are dropped (upstream `config.Split`). */
export function parseGroupList(value: string): string[] {
  checkLength(value);
  return splitItems(value)
    .filter((item) => item !== '')
    .map(parseGroupName);
}

export function parseGroupListOrWildcard(value: string): string[] | Wildcard {
  checkLength(value);
  if (value === '*') return '*';
  return parseGroupList(value);
}

/** Go `strconv.ParseBool`: returns undefined for anything it would reject. */
export function parseGoBool(text: string): boolean | undefined {
  switch (text) {
    case '1':
    case 't':
    case 'T':
    case 'true':
    case 'TRUE':
    case 'True':
      return true;
    case '0':
    case 'f':
    case 'F':
    case 'false':
    case 'FALSE':
    case 'False':
      return false;
    default:
      return undefined;
  }
}
