/**
 * Checks the build is reproducible: builds the executables of every architecture (x64, then arm64
 * into linux-arm64/) again into a scratch directory and compares their sha256 with dist/'s (which
 * `make reproducible` has just built from the same sources). Exits 1 naming every executable whose bytes differ, and for each the parts of the build
 * that differ (reproducible/buildParts.ts): the bundle, the code cache, the SEA blob, the Bun plugin's recorded
 * bytecode order, or only the final packing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { archDir, BUILT_ARCHES } from '../test/support/distLayout.ts';
import { differingParts, sha256 } from './reproducible/buildParts.ts';

const root = resolve(import.meta.dirname, '..');
const EXECUTABLES = ['istio-cni', 'install-cni'];

const scratch = mkdtempSync(join(tmpdir(), 'istio-cni-reproducible-'));
try {
  let differ = 0;
  for (const arch of BUILT_ARCHES) {
    const r = spawnSync(process.execPath, [join(root, 'scripts/build.ts'), '--arch', arch, '--out-dir', scratch], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`the second ${arch} build exited ${r.status ?? r.signal}`);
    const [firstDist, secondDist] = [archDir(join(root, 'dist'), arch), archDir(scratch, arch)];
    const [firstBuild, secondBuild] = [archDir(join(root, 'build'), arch), archDir(join(scratch, 'build'), arch)];
    for (const name of EXECUTABLES) {
      const shown = relative(root, join(firstDist, name));
      const first = sha256(join(firstDist, name));
      const second = sha256(join(secondDist, name));
      console.log(`${first}  ${shown}\n${second}  (second build) ${shown}`);
      if (first === second) continue;
      differ++;
      console.error(`${shown} differs:`);
      for (const line of differingParts(name, firstBuild, secondBuild, join(firstDist, name), join(secondDist, name)))
        console.error(`  ${line}`);
    }
  }
  if (differ > 0) {
    console.error(`not reproducible: ${differ} executable(s) differ between two builds of the same sources`);
    process.exitCode = 1;
  } else console.log(`reproducible: both builds gave byte-identical executables (${BUILT_ARCHES.join(', ')})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
