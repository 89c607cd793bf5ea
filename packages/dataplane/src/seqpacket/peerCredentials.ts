import { netnsLibc } from '../netnsSocket.ts';
import { SOL_SOCKET } from './libc.ts';
import { syscallError } from './seqpacketError.ts';

const SO_PEERCRED = 17;

/** Who is at the other end of a connected AF_UNIX socket, as the kernel recorded it at connect(). */
export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

/**
 * `getsockopt(SO_PEERCRED)` on a connected AF_UNIX socket (stream or seqpacket). The uid is the
 * peer's in this process's user namespace: a pod's root under `hostUsers: false` shows as its mapped
 * uid, never 0.
 */
export function peerCredentials(fd: number): PeerCredentials {
  const c = netnsLibc();
  const value = Buffer.alloc(12);
  const len: [number] = [value.length];
  if (c.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, value, len) !== 0) throw syscallError('read the peer credentials', c.errno());
  return { pid: value.readInt32LE(0), uid: value.readUInt32LE(4), gid: value.readUInt32LE(8) };
}

/** The uids a socket of the agent's accepts by default: root, and the agent's own (a test's, or a non-root agent's). */
export function defaultPeerUids(): ReadonlySet<number> {
  return new Set([0, process.geteuid?.() ?? 0]);
}

/**
 * Undefined when the peer of `fd` runs as one of `allowed`; otherwise what to log about it (its
 * credentials, or why they could not be read: refused too).
 */
export function refusedPeer(fd: number, allowed: ReadonlySet<number>): Record<string, number | string> | undefined {
  let peer: PeerCredentials;
  try {
    peer = peerCredentials(fd);
  } catch (err) {
    return { error: (err as Error).message };
  }
  return allowed.has(peer.uid) ? undefined : { peer_pid: peer.pid, peer_uid: peer.uid, peer_gid: peer.gid };
}
