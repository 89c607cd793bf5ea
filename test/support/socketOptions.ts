/**
 * libc socket options Node does not expose, via koffi FFI: SO_ORIGINAL_DST (what a REDIRECT
 * rewrote) and IP_TRANSPARENT (a listener TPROXY may deliver to). Linux only; tests only.
 */
import type { Server, Socket } from 'node:net';
import koffi from 'koffi';

const libc = koffi.load('libc.so.6');
const getsockopt = libc.func('int getsockopt(int fd, int level, int name, _Inout_ uint8_t *value, _Inout_ uint32_t *len)');
const setsockopt = libc.func('int setsockopt(int fd, int level, int name, uint8_t *value, uint32_t len)');

const SOL_IP = 0;
const SOL_IPV6 = 41;
const SO_ORIGINAL_DST = 80; // also IP6T_SO_ORIGINAL_DST
const IP_TRANSPARENT = 19;
const IPV6_TRANSPARENT = 75;

export interface SocketAddress {
  address: string;
  port: number;
}

function fdOf(handleOwner: Socket | Server): number {
  const fd = (handleOwner as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('socket has no file descriptor');
  return fd;
}

/** The destination before NAT REDIRECT; undefined when the connection was not NATed (e.g. TPROXY). */
export function originalDestination(socket: Socket): SocketAddress | undefined {
  const v6 = socket.localFamily === 'IPv6' || (socket.localAddress ?? '').includes(':');
  const value = Buffer.alloc(v6 ? 28 : 16);
  const len = [value.length];
  const rc = getsockopt(fdOf(socket), v6 ? SOL_IPV6 : SOL_IP, SO_ORIGINAL_DST, value, len) as number;
  if (rc !== 0) return undefined;
  const port = value.readUInt16BE(2);
  if (!v6) return { address: [...value.subarray(4, 8)].join('.'), port };
  const groups: string[] = [];
  for (let i = 8; i < 24; i += 2) groups.push(value.readUInt16BE(i).toString(16));
  return { address: compressIpv6(groups), port };
}

function compressIpv6(groups: string[]): string {
  const full = groups.join(':');
  const runs = [...full.matchAll(/(?:^|:)0(?::0)+(?::|$)/g)];
  const longest = runs.sort((a, b) => b[0].length - a[0].length)[0];
  if (longest === undefined) return full;
  const i = longest.index ?? 0;
  return `${full.slice(0, i)}::${full.slice(i + longest[0].length)}`;
}

/** Lets a listening socket accept TPROXY-diverted connections addressed to other IPs/ports. */
export function makeTransparent(server: Server, family: 'IPv4' | 'IPv6'): void {
  const one = Buffer.alloc(4);
  one.writeInt32LE(1);
  const [level, name] = family === 'IPv6' ? [SOL_IPV6, IPV6_TRANSPARENT] : [SOL_IP, IP_TRANSPARENT];
  const rc = setsockopt(fdOf(server), level, name, one, 4) as number;
  if (rc !== 0) throw new Error(`setsockopt(${family === 'IPv6' ? 'IPV6_TRANSPARENT' : 'IP_TRANSPARENT'}) failed`);
}
