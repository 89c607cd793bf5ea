import { open, readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '@istio-cni/handoff';
import { atomicCopy, removeStaleTemps } from './atomicWrite.ts';
import { recordWrite, type WriteStats } from './writeStats.ts';

type FileStat = { dev: number; ino: number; size: number; mtimeMs: number; ctimeMs: number; mode: number };

/**
 * Identity of a file version: changes whenever the file is rewritten or replaced (a write moves
 * mtime and ctime, and nothing in user space can set ctime back).
 */
function signature(st: FileStat): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}:${st.mode}`;
}

/**
 * The same for the image's copy, without the device: an overlay mount gets a new device number
 * each time the container starts, while the file version it shows stays the same.
 */
function sourceSignature(st: FileStat): string {
  return `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}:${st.mode}`;
}

/**
 * Remembers which target files were verified equal to which source version, so a pass over an
 * unchanged node neither rewrites nor re-reads a (large) plugin binary. Kept in the run dir (see
 * {@link loadVerifiedCopies}), so a restarted daemon does not read both copies again either.
 */
export type VerifiedCopies = Map<string, string>;

/** File name, in the agent run dir, of the {@link VerifiedCopies} of the last run. */
export const VERIFIED_COPIES_FILE = 'verified-binaries.json';

/** The record a previous run left; empty when there is none or it does not parse. */
export async function loadVerifiedCopies(path: string): Promise<VerifiedCopies> {
  try {
    const doc: unknown = JSON.parse(await readFile(path, 'utf8'));
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return new Map();
    return new Map(Object.entries(doc).filter((e): e is [string, string] => typeof e[1] === 'string'));
  } catch {
    return new Map();
  }
}

export function serializeVerifiedCopies(verified: VerifiedCopies): string {
  return `${JSON.stringify(Object.fromEntries([...verified].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))))}\n`;
}

const CHUNK = 1 << 20;

/** Compares two files chunk by chunk, so memory stays at two chunks whatever their size. */
async function sameContent(a: string, b: string): Promise<boolean> {
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const [sa, sb] = await Promise.all([fa.stat(), fb.stat()]);
    if (sa.size !== sb.size) return false;
    const ba = Buffer.allocUnsafe(CHUNK);
    const bb = Buffer.allocUnsafe(CHUNK);
    for (let pos = 0; pos < sa.size; ) {
      const want = Math.min(CHUNK, sa.size - pos);
      const [ra, rb] = await Promise.all([fa.read(ba, 0, want, pos), fb.read(bb, 0, want, pos)]);
      if (ra.bytesRead !== want || rb.bytesRead !== want) return false;
      if (!ba.subarray(0, want).equals(bb.subarray(0, want))) return false;
      pos += want;
    }
    return true;
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

export interface CopyBinariesOptions {
  sourceDir: string;
  targetDirs: readonly string[];
  /** When given, only these names are copied (later passes never add new names). */
  only?: ReadonlySet<string>;
  verified?: VerifiedCopies;
  logger?: Logger;
  stats?: WriteStats;
}

/**
 * Atomically copies every regular file of the source dir into each target dir (upstream `copyBinaries`),
 * removing stale temp files first and skipping targets that already hold the same bytes and mode.
 * Returns the names copied (or already in place).
 */
export async function copyBinaries(o: CopyBinariesOptions): Promise<Set<string>> {
  const names = new Set<string>();
  for (const entry of await readdir(o.sourceDir, { withFileTypes: true })) {
    if (entry.isDirectory()) continue;
    if (o.only && !o.only.has(entry.name)) continue;
    const src = join(o.sourceDir, entry.name);
    const srcStat = await stat(src);
    if (!srcStat.isFile()) continue;
    names.add(entry.name);
    const mode = srcStat.mode & 0o7777;
    for (const dir of o.targetDirs) {
      const dst = join(dir, entry.name);
      const stale = await removeStaleTemps(dst);
      if (stale.length > 0) o.logger?.info('removed stale temp files', { dir, files: stale });
      const srcSig = sourceSignature(srcStat);
      try {
        const dstStat = await stat(dst);
        const key = `${srcSig}|${signature(dstStat)}`;
        if (o.verified?.get(dst) === key) {
          o.logger?.debug('binary unchanged since verified', { path: dst });
          continue;
        }
        if ((dstStat.mode & 0o7777) === mode) {
          if (await sameContent(dst, src)) {
            o.logger?.debug('binary verified equal by content', { path: dst });
            o.verified?.set(dst, key);
            continue;
          }
        }
      } catch {
        // Missing target: copy.
      }
      await atomicCopy(src, dst, mode);
      recordWrite(o.stats, dst, srcStat.size);
      o.verified?.set(dst, `${srcSig}|${signature(await stat(dst))}`);
      o.logger?.info('copied binary', { from: src, to: dst });
    }
  }
  return names;
}
