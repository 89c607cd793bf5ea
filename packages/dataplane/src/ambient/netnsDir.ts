import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createNetnsHandle, type NetnsHandle, nsfsDevice } from './netnsHandle.ts';
import type { ScanLog } from './procScan.ts';

/** A netns file the directory holds: its name (validated) and the inode of the namespace mounted on it. */
export interface NetnsDirEntry {
  name: string;
  inode: number;
}

/**
 * The runtimes' pod netns directory (`/var/run/netns`: containerd's `cni-<uuid>`, CRI-O's `<uuid>`,
 * `ip netns add`'s names), read as data: what a runtime bind-mounted there is the only thing that
 * holds a pod's netns while no process is in it (CRI-O with `drop_infra_ctr`). Tests supply an
 * in-memory version.
 */
export interface NetnsDir {
  readonly path: string;
  /** The entries that are nsfs bind mounts, with valid names; everything else is skipped (logged at debug). */
  list(log: ScanLog): Promise<NetnsDirEntry[]>;
  /** Opens one entry of `list`; throws unless it is still an nsfs file. The caller owns the handle. */
  open(name: string): NetnsHandle;
}

/** What a runtime or `ip netns` names a netns file: no path separators, no dot files, at most NAME_MAX. */
const NETNS_FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;

export const isNetnsFileName = (name: string): boolean => NETNS_FILE_NAME.test(name);

/**
 * The real directory. Only regular files on nsfs are taken (a bind-mounted namespace reads as an
 * empty regular file of the nsfs device; the same name unmounted is a file of the directory's own
 * filesystem): symlinks are never followed (`lstat`, then `O_NOFOLLOW`), and a FIFO, device or
 * directory is never opened.
 */
export function createNetnsDir(path: string): NetnsDir {
  return {
    path,
    async list(log) {
      let names: string[];
      try {
        names = await readdir(path);
      } catch (err) {
        log('debug', `netns dir ${JSON.stringify(path)}: cannot be listed: ${(err as Error).message}`);
        return [];
      }
      const nsfs = nsfsDevice();
      const out: NetnsDirEntry[] = [];
      for (const name of names.sort()) {
        if (!isNetnsFileName(name)) {
          log('debug', `netns dir ${JSON.stringify(path)}: ignoring entry ${JSON.stringify(name)}: not a netns file name`);
          continue;
        }
        try {
          const st = await lstat(join(path, name));
          if (st.isFile() && st.dev === nsfs) out.push({ name, inode: st.ino });
          else log('debug', `netns dir ${JSON.stringify(path)}: ignoring entry ${JSON.stringify(name)}: not a mounted namespace file`);
        } catch {
          // removed while listing: its sandbox is going away
        }
      }
      return out;
    },
    open(name) {
      if (!isNetnsFileName(name)) throw new Error(`not a netns file name: ${JSON.stringify(name)}`);
      const file = join(path, name);
      const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY);
      try {
        const st = fstatSync(fd);
        if (!st.isFile() || st.dev !== nsfsDevice()) throw new Error(`${JSON.stringify(file)} is not a namespace file`);
        return createNetnsHandle({ fd, inode: st.ino, source: file });
      } catch (err) {
        closeSync(fd);
        throw err;
      }
    },
  };
}
