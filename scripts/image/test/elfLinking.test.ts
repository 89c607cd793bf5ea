import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { elfLinking } from '../elfLinking.ts';
import { hostArch } from '../../../test/support/emulation.ts';
import { neededLibraries } from '../imageContents.ts';
import { imagePlatform } from '../platforms.ts';

// Debian's busybox-static, the pinned Node.js binary and iptables' dlopened extensions: a static
// executable, a dynamic one and shared objects (no interpreter, but libraries).
const staticBusybox = '/bin/busybox';
const needsBusybox = existsSync(staticBusybox) ? false : 'needs busybox-static';
const xtables = '/usr/lib/x86_64-linux-gnu/xtables';

test('a statically linked executable names no interpreter and needs no library', { skip: needsBusybox }, () => {
  assert.deepEqual(elfLinking(staticBusybox), { needed: 0 });
});

test('a dynamically linked executable names the x86-64 loader and its libraries', () => {
  const linking = elfLinking(process.execPath);
  assert.equal(linking.interpreter, '/lib64/ld-linux-x86-64.so.2');
  assert.ok(linking.needed > 0);
});

test('a shared object has no interpreter but still needs libraries', { skip: existsSync(xtables) ? false : 'needs iptables' }, () => {
  const plugin = readdirSync(xtables).find((f) => f.endsWith('.so'));
  assert.ok(plugin !== undefined);
  const linking = elfLinking(join(xtables, plugin));
  assert.equal(linking.interpreter, undefined);
  assert.ok(linking.needed > 0);
});

test('a file that is not ELF is refused by name', () => {
  const dir = mkdtempSync(join(tmpdir(), 'elf-'));
  try {
    const file = join(dir, 'script');
    writeFileSync(file, '#!/bin/sh\n'.padEnd(128, ' '));
    assert.throws(() => elfLinking(file), /script is not an ELF file/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test('a static executable is packed with no libraries, without asking the loader', { skip: needsBusybox }, () => {
  // The loader is never run: with it, this would fail (`ld.so --list` exits 139 on a static file).
  assert.deepEqual(neededLibraries('/', staticBusybox.slice(1), imagePlatform(hostArch())), []);
});
