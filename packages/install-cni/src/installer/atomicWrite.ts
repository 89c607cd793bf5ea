import { randomBytes } from 'node:crypto';
import { chmod, constants, copyFile, open, readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Temp files are `<name>.tmp.<random>` next to the target, as upstream names them. */
export function tempPrefix(target: string): string {
  return `${basename(target)}.tmp.`;
}

/**
 * Writes `data` to `path` so that a reader (or a crash at any point) sees either the old file or
 * the complete new one: temp file in the same directory, fsync, chmod, rename, directory fsync.
 */
export async function atomicWrite(path: string, data: string | Uint8Array, mode: number): Promise<void> {
  await atomicReplace(path, mode, async (tmp) => {
    const fh = await open(tmp, 'wx', mode);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
  });
}

/**
 * {@link atomicWrite} of a copy of `source`, done by the kernel (copy_file_range): a 100 MiB plugin
 * binary never passes through the daemon's heap.
 */
export async function atomicCopy(source: string, path: string, mode: number): Promise<void> {
  await atomicReplace(path, mode, async (tmp) => {
    await copyFile(source, tmp, constants.COPYFILE_EXCL);
    const fh = await open(tmp, 'r+');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  });
}

async function atomicReplace(path: string, mode: number, fill: (tmp: string) => Promise<void>): Promise<void> {
  const dir = dirname(path);
  const tmp = join(dir, tempPrefix(path) + randomBytes(6).toString('hex'));
  let renamed = false;
  try {
    await fill(tmp);
    // The umask may have trimmed the mode given to open().
    await chmod(tmp, mode);
    await rename(tmp, path);
    renamed = true;
    await syncDir(dir);
  } finally {
    if (!renamed) await rm(tmp, { force: true });
  }
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } catch {
    // Some filesystems refuse fsync on a directory; the rename is still atomic.
  } finally {
    await fh.close();
  }
}

/** Removes temp files left by an interrupted {@link atomicWrite} of `path`. Returns their names. */
export async function removeStaleTemps(path: string): Promise<string[]> {
  const dir = dirname(path);
  const prefix = tempPrefix(path);
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return [];
  }
  const stale = names.filter((n) => n.startsWith(prefix));
  await Promise.all(stale.map((n) => rm(join(dir, n), { force: true })));
  return stale;
}
