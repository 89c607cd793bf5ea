import { readlink } from 'node:fs/promises';
import { DataplaneError } from './dataplaneError.ts';
import { spawnPiped } from './execCommandRunner.ts';

/** A private, empty network namespace that disappears once closed (or when this process dies). */
export interface ScratchNetns {
  readonly path: string;
  close(): Promise<void>;
}

export type OpenScratchNetns = () => Promise<ScratchNetns>;

export interface ScratchNetnsOptions {
  /** Path or name of unshare(1). */
  unshare?: string;
  /** Path or name of cat(1), the holder process that keeps the namespace alive. */
  cat?: string;
  timeoutMs?: number;
}

/**
 * Opens scratch namespaces with `unshare --net -- cat`: the namespace lives exactly as long as the
 * holder, which exits when its stdin closes, so nothing is left behind (no bind mount to clean up)
 * even if the agent crashes. Used to probe binaries and to let the kernel print rule sets in their
 * canonical form without touching any real namespace.
 */
export function createScratchNetnsOpener(options: ScratchNetnsOptions = {}): OpenScratchNetns {
  const unshare = options.unshare ?? 'unshare';
  const cat = options.cat ?? 'cat';
  const timeoutMs = options.timeoutMs ?? 10_000;
  return async () => {
    const child = spawnPiped([unshare, '--net', '--', cat]);
    const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
    const fail = (why: string, cause?: unknown): never => {
      child.kill('SIGKILL');
      throw new DataplaneError('ERR_DATAPLANE_SCRATCH_NETNS', `failed to open a scratch netns: ${why}`, { cause });
    };
    child.stdin.on('error', () => {});
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    // The echo proves `cat` runs, hence that unshare(2) already happened before the exec.
    const ready = new Promise<void>((resolve, reject) => {
      let seen = '';
      const timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      child.stdout.on('data', (c: Buffer) => {
        seen += c.toString();
        if (seen.includes('ready\n')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.once('close', (code) => {
        clearTimeout(timer);
        reject(new Error(`holder exited with ${code}: ${stderr.trim()}`));
      });
    });
    child.stdin.write('ready\n');
    try {
      await ready;
    } catch (err) {
      fail((err as Error).message, err);
    }
    const path = `/proc/${child.pid}/ns/net`;
    // Refuse to hand out the caller's own namespace: rules applied there would hit the host.
    const [mine, theirs] = await Promise.all([readlink('/proc/self/ns/net'), readlink(path)]).catch((err: unknown) =>
      fail(`cannot read ${path}`, err),
    );
    if (mine === theirs) fail(`holder ${child.pid} still shares this process's netns`);
    return {
      path,
      async close() {
        child.stdin.end();
        await exited;
      },
    };
  };
}

/** Runs `fn` with a fresh scratch netns and always closes it. */
export async function withScratchNetns<T>(open: OpenScratchNetns, fn: (path: string) => Promise<T>): Promise<T> {
  const ns = await open();
  try {
    return await fn(ns.path);
  } finally {
    await ns.close();
  }
}
