import { setTimeout as sleep } from 'node:timers/promises';
import { AF_UNIX, EAGAIN, EINTR, F_DUPFD_CLOEXEC, libc, SOCK_CLOEXEC, SOCK_NONBLOCK, SOCK_SEQPACKET } from './libc.ts';
import { receivePacket, sendPacket, type ReceivedPacket } from './packetIo.ts';
import { PolledFd } from './polledFd.ts';
import { SeqpacketError, syscallError } from './seqpacketError.ts';
import { sockaddrUn } from './sockaddrUn.ts';

export type { ReceivedPacket } from './packetIo.ts';

export interface SendOptions {
  /** A file descriptor to pass as SCM_RIGHTS (the kernel duplicates it; the caller keeps its own). */
  fd?: number | undefined;
  timeoutMs?: number;
}

export interface ReceiveOptions {
  /** Receive buffer size; a longer packet fails with ERR_SEQPACKET_TRUNCATED. Default 1024. */
  maxBytes?: number;
  timeoutMs?: number;
  /** Stops waiting (ERR_SEQPACKET_ABORTED); a packet already queued is still returned. */
  signal?: AbortSignal;
  /** Accept SCM_RIGHTS fds with the packet (default false: any fd that arrives is closed and the read fails). */
  acceptFds?: boolean;
}

function deadlineOf(timeoutMs: number | undefined): () => number | undefined {
  if (timeoutMs === undefined) return () => undefined;
  const end = performance.now() + timeoutMs;
  return () => Math.max(0, end - performance.now());
}

/** A connected AF_UNIX SOCK_SEQPACKET socket: one packet per message, fds as SCM_RIGHTS. */
export class SeqpacketSocket {
  readonly #io: PolledFd;

  constructor(fd: number, what = `seqpacket socket fd ${fd}`) {
    this.#io = new PolledFd(fd, what);
  }

  get fd(): number {
    return this.#io.fd;
  }

  get closed(): boolean {
    return this.#io.closed;
  }

  /** Sends one packet; EPIPE (peer gone) surfaces as ERR_SEQPACKET_SYSCALL with syscallCode `EPIPE`. */
  async send(data: Uint8Array, options: SendOptions = {}): Promise<void> {
    const remaining = deadlineOf(options.timeoutMs);
    for (;;) {
      if (this.#io.closed) throw this.#io.closedError();
      const rc = sendPacket(this.#io.fd, data, options.fd);
      if (rc !== 'again') return;
      await this.#io.wait('writable', remaining());
    }
  }

  /**
   * Receives one packet. Fails with ERR_SEQPACKET_EOF when the peer closed, ERR_SEQPACKET_TIMEOUT
   * when nothing arrives in time, ERR_SEQPACKET_TRUNCATED on MSG_TRUNC/MSG_CTRUNC.
   */
  async receive(options: ReceiveOptions = {}): Promise<ReceivedPacket> {
    const maxBytes = options.maxBytes ?? 1024;
    const remaining = deadlineOf(options.timeoutMs);
    for (;;) {
      if (this.#io.closed) throw this.#io.closedError();
      const got = receivePacket(this.#io.fd, maxBytes);
      if (got === 'eof') throw new SeqpacketError('ERR_SEQPACKET_EOF', 'peer closed the connection');
      if (got !== 'again') return checked(got, maxBytes, options.acceptFds ?? false);
      await this.#io.wait('readable', remaining(), options.signal);
    }
  }

  /** shutdown(2) one direction, leaving the fd open (tests use it to make the peer's writes fail). */
  shutdown(how: 'read' | 'write' | 'both'): void {
    const c = libc();
    if (c.shutdown(this.#io.fd, how === 'read' ? 0 : how === 'write' ? 1 : 2) !== 0) throw syscallError('shutdown', c.errno());
  }

  close(): void {
    this.#io.close();
  }
}

function checked(packet: ReceivedPacket, maxBytes: number, acceptFds: boolean): ReceivedPacket {
  const problem = packet.truncated
    ? `packet longer than ${maxBytes} bytes (MSG_TRUNC)`
    : packet.controlTruncated
      ? 'ancillary data truncated (MSG_CTRUNC)'
      : !acceptFds && packet.fds.length > 0
        ? `unexpected ${packet.fds.length} file descriptor(s) with the packet`
        : undefined;
  if (problem === undefined) return packet;
  for (const fd of packet.fds) libc().close(fd);
  throw new SeqpacketError('ERR_SEQPACKET_TRUNCATED', `failed to receive: ${problem}`);
}

function newSocketFd(): number {
  const c = libc();
  const fd = c.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw syscallError('create a SOCK_SEQPACKET socket', c.errno());
  return fd;
}

/** Connects to a SEQPACKET listener at `path` (`@name` for an abstract socket). */
export async function connectSeqpacket(path: string, options: { timeoutMs?: number } = {}): Promise<SeqpacketSocket> {
  const { addr, len } = sockaddrUn(path);
  const c = libc();
  const fd = newSocketFd();
  const remaining = deadlineOf(options.timeoutMs ?? 5_000);
  for (;;) {
    if (c.connect(fd, addr, len) === 0) return new SeqpacketSocket(fd, `seqpacket connection to ${path}`);
    const errno = c.errno();
    if (errno === EINTR) continue;
    // A unix socket whose backlog is full answers EAGAIN rather than EINPROGRESS: retry shortly.
    if (errno === EAGAIN && (remaining() ?? 1) > 0) {
      await sleep(10);
      continue;
    }
    c.close(fd);
    throw syscallError(`connect to ${JSON.stringify(path)}`, errno);
  }
}

/** A connected pair (socketpair(2)), for tests and in-process plumbing. */
export function seqpacketPair(): [SeqpacketSocket, SeqpacketSocket] {
  const c = libc();
  const sv = [-1, -1];
  if (c.socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !== 0) {
    throw syscallError('create a SOCK_SEQPACKET socket pair', c.errno());
  }
  return [new SeqpacketSocket(sv[0] ?? -1), new SeqpacketSocket(sv[1] ?? -1)];
}

/** dup(2) with close-on-exec: a private fd number the caller closes with `closeFd`. */
export function duplicateFd(fd: number): number {
  const c = libc();
  const dup = c.fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) throw syscallError(`duplicate fd ${fd}`, c.errno());
  return dup;
}

export function closeFd(fd: number): void {
  libc().close(fd);
}
