import { chmodSync, rmSync } from 'node:fs';
import { AF_UNIX, EAGAIN, EINTR, libc, SOCK_CLOEXEC, SOCK_NONBLOCK, SOCK_SEQPACKET } from './libc.ts';
import { PolledFd } from './polledFd.ts';
import { syscallError } from './seqpacketError.ts';
import { SeqpacketSocket } from './seqpacketSocket.ts';
import { sockaddrUn } from './sockaddrUn.ts';

export interface ListenSeqpacketOptions {
  /** File mode of the socket (ignored for abstract `@names`). Default 0o600. */
  mode?: number;
  backlog?: number;
}

export interface SeqpacketListener {
  readonly path: string;
  /** Resolves with the next connection; rejects with ERR_SEQPACKET_CLOSED once the listener closes. */
  accept(): Promise<SeqpacketSocket>;
  /** Closes the listening socket and removes its file. */
  close(): void;
}

/**
 * Listens on an AF_UNIX SOCK_SEQPACKET socket at `path`, replacing a stale socket file left by a
 * previous run. The mode is set between bind and listen, so no peer can connect while the file
 * still has the umask's permissions.
 */
export function listenSeqpacket(path: string, options: ListenSeqpacketOptions = {}): SeqpacketListener {
  const { addr, len } = sockaddrUn(path);
  const abstract = path.startsWith('@');
  const c = libc();
  if (!abstract) rmSync(path, { force: true });
  const fd = c.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw syscallError('create a SOCK_SEQPACKET socket', c.errno());
  try {
    if (c.bind(fd, addr, len) !== 0) throw syscallError(`bind ${JSON.stringify(path)}`, c.errno());
    if (!abstract) chmodSync(path, options.mode ?? 0o600);
    if (c.listen(fd, options.backlog ?? 16) !== 0) throw syscallError(`listen on ${JSON.stringify(path)}`, c.errno());
  } catch (err) {
    c.close(fd);
    if (!abstract) rmSync(path, { force: true });
    throw err;
  }
  const io = new PolledFd(fd, `seqpacket listener ${path}`);
  let accepted = 0;
  return {
    path,
    async accept() {
      for (;;) {
        if (io.closed) throw io.closedError();
        const conn = c.accept4(fd, null, null, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn >= 0) return new SeqpacketSocket(conn, `seqpacket connection #${++accepted} on ${path}`);
        const errno = c.errno();
        if (errno === EINTR) continue;
        if (errno !== EAGAIN) throw syscallError(`accept on ${JSON.stringify(path)}`, errno);
        await io.wait('readable');
      }
    },
    close() {
      if (io.closed) return;
      io.close();
      if (!abstract) rmSync(path, { force: true });
    },
  };
}
