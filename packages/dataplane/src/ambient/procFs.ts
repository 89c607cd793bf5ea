import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type NetnsHandle, openNetnsHandle } from './netnsHandle.ts';

/**
 * The few operations the netns scan needs on a procfs root (`/proc`, or `/host/proc` in the
 * agent's container). Paths are relative to the root. Tests supply an in-memory version.
 */
export interface ProcFs {
  /**
   * Names of the root's entries. Names only: procfs reports a process exiting during the listing with
   * no file type, and asking for types would then stat it and fail the whole listing.
   */
  readDir(): Promise<string[]>;
  /** Identity of the file a path resolves to (`<pid>/ns/net` follows the namespace link). */
  stat(path: string): Promise<{ ino: number; dev: number }>;
  readFile(path: string): Promise<string>;
  /** Opens a namespace file; the caller owns the returned handle. */
  openNetns(path: string, options?: { ownerStartTime?: number }): Promise<NetnsHandle>;
}

/** The real procfs under `root` (default `/proc`). */
export function createProcFs(root = '/proc'): ProcFs {
  return {
    readDir: () => readdir(root),
    async stat(path) {
      const s = await stat(join(root, path));
      return { ino: s.ino, dev: s.dev };
    },
    readFile: (path) => readFile(join(root, path), 'utf8'),
    async openNetns(path, options = {}) {
      return openNetnsHandle(join(root, path), options);
    },
  };
}
