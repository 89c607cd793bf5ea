import { openSync } from 'node:fs';
import { loadKoffi } from './seqpacket/loadKoffi.ts';

/** The libc calls the in-netns readers need (`nftGeneration.ts`, `legacyTablesFingerprint.ts`), through koffi. */
export interface NetnsLibc {
  setns(fd: number, nstype: number): number;
  socket(domain: number, type: number, protocol: number): number;
  send(fd: number, buf: Buffer, len: number, flags: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  /** `optlen` is read and updated in place (`[length]`). */
  getsockopt(fd: number, level: number, name: number, value: Buffer, optlen: [number]): number;
  close(fd: number): number;
  errno(): number;
}

const CLONE_NEWNET = 0x40000000;
export const SOCK_CLOEXEC = 0o2000000;

let bound: NetnsLibc | undefined;

/** Binds libc on first use: koffi is loaded only by a process that reads a pod netns this way. */
export function netnsLibc(): NetnsLibc {
  if (bound !== undefined) return bound;
  const koffi = loadKoffi();
  const lib = koffi.load('libc.so.6');
  const f = (decl: string) => lib.func(decl) as (...args: unknown[]) => number;
  const setns = f('int setns(int fd, int nstype)');
  const socket = f('int socket(int domain, int type, int protocol)');
  const send = f('long send(int fd, const void *buf, size_t len, int flags)');
  const recv = f('long recv(int fd, _Out_ void *buf, size_t len, int flags)');
  const getsockopt = f('int getsockopt(int fd, int level, int name, _Out_ void *value, _Inout_ uint32_t *optlen)');
  const close = f('int close(int fd)');
  bound = {
    setns: (fd, t) => setns(fd, t),
    socket: (d, t, p) => socket(d, t, p),
    send: (fd, b, l, fl) => Number(send(fd, b, l, fl)),
    recv: (fd, b, l, fl) => Number(recv(fd, b, l, fl)),
    getsockopt: (fd, level, name, value, optlen) => getsockopt(fd, level, name, value, optlen),
    close: (fd) => close(fd),
    errno: () => koffi.errno(),
  };
  return bound;
}

let ownNetns: number | undefined;

/**
 * Runs `fn` (synchronous: no other JavaScript runs meanwhile) with this thread inside the netns open
 * at `netnsFd`, and returns to the agent's own netns at once. A socket created in `fn` stays bound to
 * the pod's netns. Exits the process if it cannot return: every later socket would land in the pod's.
 */
export function inNetnsSync<T>(libc: NetnsLibc, netnsFd: number, fn: () => T): T {
  ownNetns ??= openSync('/proc/thread-self/ns/net', 'r');
  if (libc.setns(netnsFd, CLONE_NEWNET) !== 0) throw new Error(`setns into the pod netns failed (errno ${libc.errno()})`);
  try {
    return fn();
  } finally {
    if (libc.setns(ownNetns, CLONE_NEWNET) !== 0) {
      process.stderr.write(`fatal: could not return to the agent's network namespace (errno ${libc.errno()})\n`);
      process.exit(70);
    }
  }
}
