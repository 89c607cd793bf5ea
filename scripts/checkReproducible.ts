/**
 * Checks the build is reproducible: builds the executables again into a scratch directory and
 * compares their sha256 with dist/'s (which `make reproducible` has just built from the same
 * sources). Exits 1 naming every executable whose bytes differ, and for each the parts of the build
 * that differ (reproducible/buildParts.ts): the bundle, the code cache, the SEA blob, the Bun plugin's recorded
 * bytecode order, or only the final packing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { differingParts, sha256 } from './reproducible/buildParts.ts';

const root = resolve(import.meta.dirname, '..');
const EXECUTABLES = ['istio-cni', 'install-cni'];

const scratch = mkdtempSync(join(tmpdir(), 'istio-cni-reproducible-'));
try {
  const r = spawnSync(process.execPath, [join(root, 'scripts/build.ts'), '--out-dir', scratch], { stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`the second build exited ${r.status ?? r.signal}`);
  let differ = 0;
  for (const name of EXECUTABLES) {
    const first = sha256(join(root, 'dist', name));
    const second = sha256(join(scratch, name));
    console.log(`${first}  dist/${name}\n${second}  (second build) ${name}`);
    if (first === second) continue;
    differ++;
    console.error(`${name} differs:`);
    for (const line of differingParts(name, join(root, 'build'), join(scratch, 'build'), join(root, 'dist', name), join(scratch, name)))
      console.error(`  ${line}`);
  }
  if (differ > 0) {
    console.error(`not reproducible: ${differ} executable(s) differ between two builds of the same sources`);
    process.exitCode = 1;
  } else console.log('reproducible: both builds gave byte-identical executables');
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
