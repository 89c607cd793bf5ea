import { existsSync, watch, type FSWatcher } from 'node:fs';

export interface WatchTarget {
  dir: string;
  /** Only events for these names count; undefined = any entry of the directory. */
  names?: ReadonlySet<string>;
  /** Only events for names passing this test count. */
  accept?: (name: string) => boolean;
}

const MISSING_DIR_POLL_MS = 1000;

/**
 * Watches directories (inotify via fs.watch), never single files: kubelet replaces projected
 * files by swapping the `..data` symlink and other writers replace files by rename, both of which
 * a file watch would lose. Any event, watch error or a missing directory appearing counts as "something
 * changed"; the caller re-lists what it cares about, so lost or coalesced events do no harm.
 */
export class DirWatcher {
  readonly #watchers: FSWatcher[] = [];
  readonly #timers: NodeJS.Timeout[] = [];
  #pending = false;
  #wake: (() => void) | undefined;
  #closed = false;

  constructor(targets: readonly WatchTarget[]) {
    for (const t of targets) this.#add(t);
  }

  #add(t: WatchTarget): void {
    if (!existsSync(t.dir)) {
      const timer = setInterval(() => {
        if (existsSync(t.dir)) this.#fire();
      }, MISSING_DIR_POLL_MS);
      timer.unref();
      this.#timers.push(timer);
      return;
    }
    try {
      const w = watch(t.dir, { persistent: false }, (_event, name) => {
        if (name === null) return this.#fire();
        const n = String(name);
        if ((t.names === undefined || t.names.has(n)) && (t.accept === undefined || t.accept(n))) this.#fire();
      });
      w.on('error', () => this.#fire());
      this.#watchers.push(w);
    } catch {
      // Vanished between the check and the watch: treat as a change.
      this.#fire();
    }
  }

  #fire(): void {
    this.#pending = true;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** An event arrived since the watcher was created (or since the last {@link wait}). */
  get pending(): boolean {
    return this.#pending;
  }

  /** Forgets events seen so far (call just before reading what the watched dirs hold). */
  clearPending(): void {
    this.#pending = false;
  }

  /** Resolves true on a change, false when `signal` aborts. */
  wait(signal?: AbortSignal): Promise<boolean> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve(true);
    }
    if (signal?.aborted || this.#closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const onAbort = (): void => {
        this.#wake = undefined;
        resolve(false);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#wake = () => {
        signal?.removeEventListener('abort', onAbort);
        this.#pending = false;
        resolve(true);
      };
    });
  }

  close(): void {
    this.#closed = true;
    for (const w of this.#watchers) w.close();
    for (const t of this.#timers) clearInterval(t);
    this.#watchers.length = 0;
    this.#timers.length = 0;
  }
}
