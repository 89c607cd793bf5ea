import { randomBytes } from 'node:crypto';
import { writeSync } from 'node:fs';
import { chmod, open, readdir, rename, rm } from 'node:fs/promises';
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

/** Bytes read from the source per step of {@link atomicCopy}. */
const COPY_READ_BYTES = 1 << 20;
/**
 * The size of each write of {@link atomicCopy}: the page cache sizes a file's folios by the writes
 * that filled it (ext4 and XFS on Linux ≥ 6.x), and every exec of the copy maps whole folios and
 * their neighbours, not only the pages it touches. The plugin copied with copy_file_range (64 KiB
 * or larger folios) peaked 5 MiB higher per exec than the same file written 32 KiB at a time or
 * read back from disk (docs/benchmarks.md, "The plugin built with Bun").
 */
const COPY_WRITE_BYTES = 32 * 1024;

/**
 * {@link atomicWrite} of a copy of `source`, written {@link COPY_WRITE_BYTES} at a time so the
 * copy's page cache holds small folios. Reads go through the thread pool; the writes only fill the
 * page cache (the fsync is what waits for the disk), so they run synchronously, one 1 MiB read's
 * worth per turn of the event loop: the 107 MiB plugin copies and syncs in ~120 ms, ~30 ms more
 * than copy_file_range.
 */
export async function atomicCopy(source: string, path: string, mode: number): Promise<void> {
  await atomicReplace(path, mode, async (tmp) => {
    const src = await open(source, 'r');
    try {
      const out = await open(tmp, 'wx', mode);
      try {
        const buf = Buffer.allocUnsafe(COPY_READ_BYTES);
        for (;;) {
          const { bytesRead } = await src.read(buf, 0, buf.length, null);
          if (bytesRead === 0) break;
          for (let off = 0; off < bytesRead; ) off += writeSync(out.fd, buf, off, Math.min(COPY_WRITE_BYTES, bytesRead - off));
        }
        await out.sync();
      } finally {
        await out.close();
      }
    } finally {
      await src.close();
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
