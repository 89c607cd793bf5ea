/**
 * One non-blocking `sendmsg`/`recvmsg` on a SEQPACKET socket, with SCM_RIGHTS ancillary data.
 * The `msghdr`, `iovec`, control and data areas live in one native block (koffi.alloc) so the
 * pointers inside `msghdr` are plain addresses the kernel can follow; Linux LP64 layout.
 */
import {
  EAGAIN,
  EINTR,
  libc,
  MSG_CMSG_CLOEXEC,
  MSG_CTRUNC,
  MSG_DONTWAIT,
  MSG_NOSIGNAL,
  MSG_TRUNC,
  SCM_RIGHTS,
  SOL_SOCKET,
} from './libc.ts';
import { syscallError } from './seqpacketError.ts';

const MSGHDR_SIZE = 56;
const IOVEC_SIZE = 16;
const CMSG_HEADER = 16;
/** Room for a few fds: a peer sending more than expected still gets them closed, not leaked. */
const RECEIVE_CONTROL_SIZE = CMSG_HEADER + 8 * 4;

export interface ReceivedPacket {
  data: Buffer;
  /** File descriptors that arrived with the packet; the caller owns (and must close) them. */
  fds: number[];
  /** The packet was longer than the receive buffer (MSG_TRUNC). */
  truncated: boolean;
  /** Ancillary data did not fit (MSG_CTRUNC). */
  controlTruncated: boolean;
}

function align8(n: number): number {
  return (n + 7) & ~7;
}

/** Builds msghdr + iovec (+ control) in one native block and runs `call` on it. */
function withMessage<T>(
  dataLen: number,
  controlLen: number,
  call: (ptr: object, view: Buffer, offsets: { control: number; data: number }) => T,
): T {
  const { koffi } = libc();
  const control = MSGHDR_SIZE + IOVEC_SIZE;
  const data = control + align8(controlLen);
  const total = data + Math.max(dataLen, 1);
  const ptr = koffi.alloc('uint8_t', total) as object;
  try {
    const view = Buffer.from(koffi.view(ptr, total));
    view.fill(0);
    const base = BigInt(koffi.address(ptr) as bigint | number);
    view.writeBigUInt64LE(base + BigInt(MSGHDR_SIZE), 16); // msg_iov
    view.writeBigUInt64LE(1n, 24); // msg_iovlen
    if (controlLen > 0) {
      view.writeBigUInt64LE(base + BigInt(control), 32); // msg_control
      view.writeBigUInt64LE(BigInt(controlLen), 40); // msg_controllen
    }
    view.writeBigUInt64LE(base + BigInt(data), MSGHDR_SIZE); // iov_base
    view.writeBigUInt64LE(BigInt(dataLen), MSGHDR_SIZE + 8); // iov_len
    return call(ptr, view, { control, data });
  } finally {
    koffi.free(ptr);
  }
}

/**
 * Sends `data` as one packet, with `passFd` as SCM_RIGHTS when given. Returns `again` when the
 * socket buffer is full; throws a SeqpacketError for any other failure (EPIPE when the peer is gone).
 */
export function sendPacket(fd: number, data: Uint8Array, passFd?: number): number | 'again' {
  const c = libc();
  const controlLen = passFd === undefined ? 0 : CMSG_HEADER + 8;
  for (;;) {
    const rc = withMessage(data.length, controlLen, (ptr, view, off) => {
      view.set(data, off.data);
      if (passFd !== undefined) {
        view.writeBigUInt64LE(BigInt(CMSG_HEADER + 4), off.control); // cmsg_len = CMSG_LEN(4)
        view.writeInt32LE(SOL_SOCKET, off.control + 8);
        view.writeInt32LE(SCM_RIGHTS, off.control + 12);
        view.writeInt32LE(passFd, off.control + CMSG_HEADER);
      }
      return c.sendmsg(fd, ptr, MSG_DONTWAIT | MSG_NOSIGNAL);
    });
    if (rc >= 0) return rc;
    const errno = c.errno();
    if (errno === EINTR) continue;
    if (errno === EAGAIN) return 'again';
    throw syscallError('sendmsg', errno);
  }
}

/**
 * Receives one packet into a `maxBytes` buffer. Returns `again` when nothing is queued and `eof`
 * on a zero-length read (peer closed; SEQPACKET cannot tell that from an empty packet, and Go
 * treats it as EOF too).
 */
export function receivePacket(fd: number, maxBytes: number): ReceivedPacket | 'again' | 'eof' {
  const c = libc();
  for (;;) {
    const out = withMessage(
      maxBytes,
      RECEIVE_CONTROL_SIZE,
      (ptr, view, off): { errno: number } | { rc: number; packet: ReceivedPacket } => {
        const rc = c.recvmsg(fd, ptr, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (rc < 0) return { errno: c.errno() };
        const flags = view.readInt32LE(48);
        const controlLen = Number(view.readBigUInt64LE(40));
        const fds = parseRights(view, off.control, controlLen);
        const packet: ReceivedPacket = {
          data: Buffer.from(view.subarray(off.data, off.data + Math.min(rc, maxBytes))),
          fds,
          truncated: (flags & MSG_TRUNC) !== 0,
          controlTruncated: (flags & MSG_CTRUNC) !== 0,
        };
        return { rc, packet };
      },
    );
    if ('errno' in out) {
      if (out.errno === EINTR) continue;
      if (out.errno === EAGAIN) return 'again';
      throw syscallError('recvmsg', out.errno);
    }
    if (out.rc === 0 && out.packet.fds.length === 0 && !out.packet.truncated) return 'eof';
    return out.packet;
  }
}

function parseRights(view: Buffer, start: number, length: number): number[] {
  const fds: number[] = [];
  let at = start;
  while (at + CMSG_HEADER <= start + length) {
    const len = Number(view.readBigUInt64LE(at));
    if (len < CMSG_HEADER) break;
    if (view.readInt32LE(at + 8) === SOL_SOCKET && view.readInt32LE(at + 12) === SCM_RIGHTS) {
      for (let p = at + CMSG_HEADER; p + 4 <= at + len; p += 4) fds.push(view.readInt32LE(p));
    }
    at += align8(len);
  }
  return fds;
}
