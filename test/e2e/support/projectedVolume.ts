import { mkdirSync, readdirSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

let generation = 0;

/**
 * Writes files into dir the way kubelet's AtomicWriter fills a projected volume: the content goes
 * into a fresh `..<timestamp>` directory, the `..data` symlink is swapped to it with one rename,
 * and each visible name is a symlink through `..data`. A watcher sees the update as one event on
 * `..data`, never a half-written token.
 */
export function writeProjectedVolume(dir: string, files: Record<string, string>): void {
  mkdirSync(dir, { recursive: true });
  const stamp = new Date().toISOString().replace(/[-:]/g, '_').replace('T', '_').replace('Z', '');
  const versioned = `..${stamp}.${process.pid}${++generation}`;
  mkdirSync(join(dir, versioned), { mode: 0o755 });
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, versioned, name), content, { mode: 0o644 });
  let previous: string | undefined;
  try {
    previous = readlinkSync(join(dir, '..data'));
  } catch {
    // first write
  }
  symlinkSync(versioned, join(dir, '..data_tmp'));
  renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  const visible = new Set(readdirSync(dir).filter((n) => !n.startsWith('..')));
  for (const name of Object.keys(files)) if (!visible.has(name)) symlinkSync(join('..data', name), join(dir, name));
  if (previous !== undefined && previous !== versioned) rmSync(join(dir, previous), { recursive: true, force: true });
}
