/**
 * A non-blocking fd whose readiness comes from a libuv poll handle (`koffi.node.poll`, i.e.
 * uv_poll_t): the event loop watches the fd like any Node socket, no thread is parked in a
 * blocking call, and timeouts are ordinary timers. libuv allows one poll handle per fd, so this
 * class owns it and multiplexes at most one reader and one writer on it.
 */
import type { Koffi } from './loadKoffi.ts';
import { libc } from './libc.ts';
import { SeqpacketError, syscallError } from './seqpacketError.ts';

type PollHandle = ReturnType<Koffi['node']['poll']>;
type Kind = 'readable' | 'writable';

interface Waiter {
  resolve(): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout | undefined;
}

function abortedError(what: string): SeqpacketError {
  return new SeqpacketError('ERR_SEQPACKET_ABORTED', `wait on ${what} aborted`);
}

export class PolledFd {
  readonly fd: number;
  readonly #what: string;
  #poll: PollHandle | undefined;
  #closed = false;
  readonly #waiters = new Map<Kind, Waiter>();

  constructor(fd: number, what: string) {
    this.fd = fd;
    this.#what = what;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Resolves when the fd is readable/writable; rejects on timeout (ERR_SEQPACKET_TIMEOUT) or close. */
  wait(kind: Kind, timeoutMs?: number, signal?: AbortSignal): Promise<void> {
    if (this.#closed) return Promise.reject(this.closedError());
    if (signal?.aborted) return Promise.reject(abortedError(this.#what));
    if (this.#waiters.has(kind)) {
      return Promise.reject(new SeqpacketError('ERR_SEQPACKET_BUSY', `${this.#what} already has a pending ${kind} wait`));
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, timer: undefined };
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(
          () => {
            this.#settle(
              kind,
              new SeqpacketError('ERR_SEQPACKET_TIMEOUT', `timed out after ${timeoutMs} ms waiting for ${this.#what} to become ${kind}`),
            );
          },
          Math.max(0, timeoutMs),
        );
      }
      if (signal !== undefined) {
        const onAbort = (): void => this.#settle(kind, abortedError(this.#what));
        signal.addEventListener('abort', onAbort, { once: true });
        const { resolve: res, reject: rej } = waiter;
        waiter.resolve = () => {
          signal.removeEventListener('abort', onAbort);
          res();
        };
        waiter.reject = (err) => {
          signal.removeEventListener('abort', onAbort);
          rej(err);
        };
      }
      this.#waiters.set(kind, waiter);
      this.#rearm();
    });
  }

  closedError(): SeqpacketError {
    return new SeqpacketError('ERR_SEQPACKET_CLOSED', `${this.#what} is closed`);
  }

  /** Stops polling, fails pending waits and closes the fd. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const kind of [...this.#waiters.keys()]) this.#settle(kind, this.closedError());
    if (this.#poll !== undefined) {
      // Stop before close(2): libuv must forget the fd before the number can be reused.
      this.#poll.stop();
      this.#poll.close();
      this.#poll = undefined;
    }
    libc().close(this.fd);
  }

  #settle(kind: Kind, err?: Error): void {
    const waiter = this.#waiters.get(kind);
    if (waiter === undefined) return;
    this.#waiters.delete(kind);
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    if (err === undefined) waiter.resolve();
    else waiter.reject(err);
    if (!this.#closed) this.#rearm();
  }

  #rearm(): void {
    const readable = this.#waiters.has('readable');
    const writable = this.#waiters.has('writable');
    if (!readable && !writable) {
      this.#poll?.stop();
      return;
    }
    const onEvent = (status: number, ev: { readable: boolean; writable: boolean; disconnect: boolean }): void => {
      if (status < 0) {
        const err = syscallError(`poll ${this.#what}`, -status);
        for (const kind of [...this.#waiters.keys()]) this.#settle(kind, err);
        return;
      }
      // A hang-up counts as readable: the next read reports EOF or the error.
      if (ev.readable || ev.disconnect) this.#settle('readable');
      if (ev.writable || ev.disconnect) this.#settle('writable');
    };
    const opts = { readable, writable, disconnect: true };
    const callback = onEvent as unknown as (ev: unknown) => void;
    if (this.#poll === undefined) this.#poll = libc().koffi.node.poll(this.fd, opts, callback);
    else this.#poll.start(opts, callback);
  }
}
