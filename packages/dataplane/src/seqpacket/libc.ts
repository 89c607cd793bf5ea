/**
 * The few libc calls Node does not offer for AF_UNIX SOCK_SEQPACKET sockets, bound lazily through
 * koffi. Every call is non-blocking (sockets are created with SOCK_NONBLOCK); readiness comes from
 * libuv via `koffi.node.poll`, so the event loop never blocks. Linux x86-64/arm64 layouts.
 */
import { loadKoffi, loadedKoffi, type Koffi } from './loadKoffi.ts';

export const AF_UNIX = 1;
export const SOCK_SEQPACKET = 5;
export const SOCK_NONBLOCK = 0o4000;
export const SOCK_CLOEXEC = 0o2000000;
export const SOL_SOCKET = 1;
export const SCM_RIGHTS = 1;
export const MSG_TRUNC = 0x20;
export const MSG_DONTWAIT = 0x40;
export const MSG_CTRUNC = 0x08;
export const MSG_NOSIGNAL = 0x4000;
export const MSG_CMSG_CLOEXEC = 0x40000000;
export const F_DUPFD_CLOEXEC = 1030;

export const EINTR = 4;
export const EAGAIN = 11;
export const EINPROGRESS = 115;

/** A native memory block from koffi.alloc. */
export type NativePointer = object;

export interface Libc {
  koffi: Koffi;
  socket(domain: number, type: number, protocol: number): number;
  socketpair(domain: number, type: number, protocol: number, sv: number[]): number;
  bind(fd: number, addr: Buffer, len: number): number;
  listen(fd: number, backlog: number): number;
  accept4(fd: number, addr: null, len: null, flags: number): number;
  connect(fd: number, addr: Buffer, len: number): number;
  sendmsg(fd: number, msg: NativePointer, flags: number): number;
  recvmsg(fd: number, msg: NativePointer, flags: number): number;
  fcntl(fd: number, cmd: number, arg: number): number;
  close(fd: number): number;
  shutdown(fd: number, how: number): number;
  /** errno of the last call made through this module. */
  errno(): number;
}

let cached: Libc | undefined;

export function libc(): Libc {
  cached ??= bind(loadKoffi());
  return cached;
}

let mallocTrim: ((pad: number) => number) | undefined;

/**
 * glibc's `malloc_trim(0)`: free memory in malloc's arenas handed back to the system. Only once
 * koffi is loaded for something else (false otherwise): loading it costs more than this saves.
 */
export function trimMallocArenas(): boolean {
  const koffi = loadedKoffi();
  if (koffi === undefined) return false;
  mallocTrim ??= koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') as (pad: number) => number;
  mallocTrim(0);
  return true;
}

function bind(koffi: Koffi): Libc {
  const lib = koffi.load('libc.so.6');
  const f = (decl: string) => lib.func(decl) as (...args: unknown[]) => number;
  const fcntl = lib.func('fcntl', 'int', ['int', 'int', '...']) as (...args: unknown[]) => number;
  const socket = f('int socket(int domain, int type, int protocol)');
  const socketpair = f('int socketpair(int domain, int type, int protocol, _Out_ int *sv)');
  const bindFn = f('int bind(int fd, const void *addr, uint32_t len)');
  const listen = f('int listen(int fd, int backlog)');
  const accept4 = f('int accept4(int fd, void *addr, void *len, int flags)');
  const connect = f('int connect(int fd, const void *addr, uint32_t len)');
  const sendmsg = f('long sendmsg(int fd, void *msg, int flags)');
  const recvmsg = f('long recvmsg(int fd, void *msg, int flags)');
  const close = f('int close(int fd)');
  const shutdown = f('int shutdown(int fd, int how)');
  return {
    koffi,
    socket: (d, t, p) => socket(d, t, p),
    socketpair: (d, t, p, sv) => socketpair(d, t, p, sv),
    bind: (fd, addr, len) => bindFn(fd, addr, len),
    listen: (fd, backlog) => listen(fd, backlog),
    accept4: (fd, addr, len, flags) => accept4(fd, addr, len, flags),
    connect: (fd, addr, len) => connect(fd, addr, len),
    sendmsg: (fd, msg, flags) => Number(sendmsg(fd, msg, flags)),
    recvmsg: (fd, msg, flags) => Number(recvmsg(fd, msg, flags)),
    fcntl: (fd, cmd, arg) => fcntl(fd, cmd, 'int', arg),
    close: (fd) => close(fd),
    shutdown: (fd, how) => shutdown(fd, how),
    errno: () => koffi.errno(),
  };
}
