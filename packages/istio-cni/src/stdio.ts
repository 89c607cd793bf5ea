import { writeSync } from 'node:fs';

/** Descriptors whose writes go to the runtime's stream since one direct write failed. */
const toStream = new Set<1 | 2>();

/**
 * Writes to stdout (1) or stderr (2) with write(2) directly. Under Bun the first use of
 * `process.stdout`/`process.stderr` builds a Node-compatible stream, and that alone cost a plugin
 * exec ~4 MiB of peak RSS and a few milliseconds (docs/benchmarks.md, "The plugin built with Bun").
 * The runtime hands the plugin blocking pipes (libcni execs it with Go's os/exec), so a synchronous
 * write returns once the pipe has taken everything. When a write fails (a non-blocking pipe that
 * is full: EAGAIN; a reader gone), the rest, and every later write to that descriptor so that
 * nothing overtakes it, goes to the stream as before, which waits on a full pipe and flushes
 * before exit.
 */
export function writeStdio(fd: 1 | 2, text: string): void {
  const bytes = Buffer.from(text);
  let off = 0;
  if (!toStream.has(fd)) {
    try {
      while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
      return;
    } catch {
      toStream.add(fd);
    }
  }
  (fd === 1 ? process.stdout : process.stderr).write(bytes.subarray(off));
}
