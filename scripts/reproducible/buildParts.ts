/**
 * Names what differs between two builds of one executable (scripts/checkReproducible.ts): each
 * intermediate file scripts/build.ts wrote for it (bundle, code cache, SEA blob and config, loader;
 * for the Bun plugin its recorded bytecode order), and where the executables' bytes first differ.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const sha256 = (path: string): string => createHash('sha256').update(readFileSync(path)).digest('hex');

/** The build directory's files that go into `name`: `name.*`, `name-*` and, for Bun, bun-order/. */
export function buildPartsOf(name: string, buildDir: string): string[] {
  const own = existsSync(buildDir) ? readdirSync(buildDir).filter((f) => f.startsWith(`${name}.`) || f.startsWith(`${name}-`)) : [];
  const orderDir = join(buildDir, 'bun-order');
  const orders = name === 'istio-cni' && existsSync(orderDir) ? readdirSync(orderDir).map((f) => join('bun-order', f)) : [];
  return [...own, ...orders].sort();
}

/** The offset of the first byte where two buffers differ, or -1 when they are equal. */
export function firstDifference(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

export function differingParts(name: string, buildA: string, buildB: string, exeA: string, exeB: string): string[] {
  const lines: string[] = [];
  const parts = new Set([...buildPartsOf(name, buildA), ...buildPartsOf(name, buildB)]);
  for (const part of [...parts].sort()) {
    const a = join(buildA, part);
    const b = join(buildB, part);
    if (!existsSync(a) || !existsSync(b)) lines.push(`build/${part}: only in the ${existsSync(a) ? 'first' : 'second'} build`);
    else if (sha256(a) !== sha256(b)) {
      const [bytesA, bytesB] = [readFileSync(a), readFileSync(b)];
      lines.push(`build/${part}: differs (${bytesA.length} / ${bytesB.length} bytes, first at byte ${firstDifference(bytesA, bytesB)})`);
    }
  }
  if (lines.length === 0) lines.push('every intermediate file is identical: the difference is in the final packing');
  const [a, b] = [readFileSync(exeA), readFileSync(exeB)];
  lines.push(`executable: ${a.length} / ${b.length} bytes, first difference at byte ${firstDifference(a, b)}`);
  return lines;
}
