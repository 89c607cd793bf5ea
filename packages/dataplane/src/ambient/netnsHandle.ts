import { closeSync, fstatSync, openSync, statSync } from 'node:fs';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';

/**
 * An open network namespace: the fd keeps the namespace alive and identifies it even after the
 * process or bind mount it came from is gone; the inode is its identity (same inode = same netns).
 *
 * Ownership: whoever opened or took a handle closes it. The pod netns cache owns the handles it
 * holds and closes them when pods leave or are replaced; `take()` hands ownership to the caller.
 *
 * Node offers no setns(2), so commands run in the namespace through `nsenter --net=<path>` where
 * `path` is this process's `/proc/<pid>/fd/<fd>`. `/proc/self/fd/<fd>` would not do: in the child
 * `self` is the child, which does not inherit the fd. Because the child opens that path later, the
 * fd must stay open (and not be reused for another file) until it has: `use()` pins the handle and
 * `close()` defers the real close until every `use()` has finished.
 */
export interface NetnsHandle {
  readonly fd: number;
  readonly inode: number;
  /** `starttime` (field 22 of `/proc/<pid>/stat`) of the process it was found through, if any. */
  readonly ownerStartTime?: number;
  /** Where it was opened from, for messages. */
  readonly source: string;
  /** A path other processes can open while the handle is pinned. */
  readonly path: string;
  readonly closed: boolean;
  /** Runs `fn` with `path`, keeping the fd open until it settles; fails if already closed. */
  use<T>(fn: (path: string) => Promise<T>): Promise<T>;
  /** Idempotent; the fd is released once no `use()` is in flight. */
  close(): void;
}

export interface NetnsHandleInit {
  fd: number;
  inode: number;
  source: string;
  ownerStartTime?: number;
  /** Defaults to `/proc/<this pid>/fd/<fd>`. */
  path?: string;
  /** Releases the fd; defaults to `fs.closeSync`. */
  release?: (fd: number) => void;
}

/** Wraps an already open fd; the handle now owns it. */
export function createNetnsHandle(init: NetnsHandleInit): NetnsHandle {
  const release = init.release ?? closeSync;
  let closed = false;
  let inUse = 0;
  let released = false;
  const releaseIfIdle = (): void => {
    if (!closed || inUse > 0 || released) return;
    released = true;
    release(init.fd);
  };
  return {
    fd: init.fd,
    inode: init.inode,
    ...(init.ownerStartTime === undefined ? {} : { ownerStartTime: init.ownerStartTime }),
    source: init.source,
    path: init.path ?? `/proc/${process.pid}/fd/${init.fd}`,
    get closed() {
      return closed;
    },
    async use(fn) {
      if (closed) {
        throw new AmbientDataplaneError('ERR_AMBIENT_NETNS', `failed to use netns ${JSON.stringify(init.source)}: handle already closed`);
      }
      inUse++;
      try {
        return await fn(this.path);
      } finally {
        inUse--;
        releaseIfIdle();
      }
    },
    close() {
      closed = true;
      releaseIfIdle();
    },
  };
}

/**
 * Opens a netns file (`/var/run/netns/x`, `/proc/<pid>/ns/net`, ...) read-only. The fd is checked
 * to really be a network namespace (`net:[<inode>]`), so a stray regular file or another
 * namespace type is refused with an error naming the path; nothing stays open on failure.
 */
export function openNetnsHandle(path: string, options: { ownerStartTime?: number } = {}): NetnsHandle {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    throw new AmbientDataplaneError('ERR_AMBIENT_NETNS', `failed to open netns ${JSON.stringify(path)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  try {
    // Namespace files live on nsfs (one device for all of them), whether opened through
    // /proc/<pid>/ns/net or through a bind mount such as /var/run/netns/x. The namespace type
    // is not checked here: nsenter --net refuses any other type.
    const st = fstatSync(fd);
    if (st.dev !== nsfsDevice()) throw new Error('not a namespace file');
    return createNetnsHandle({ fd, inode: st.ino, source: path, ...options });
  } catch (err) {
    closeSync(fd);
    throw new AmbientDataplaneError('ERR_AMBIENT_NETNS', `failed to open netns ${JSON.stringify(path)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

let nsfsDev: number | undefined;

/** The device every namespace file lives on (nsfs), whether reached through procfs or a bind mount. */
export function nsfsDevice(): number {
  nsfsDev ??= statSync('/proc/self/ns/net').dev;
  return nsfsDev;
}
