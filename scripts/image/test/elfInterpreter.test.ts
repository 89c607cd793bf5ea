import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { elfInterpreter } from '../elfInterpreter.ts';
import { neededLibraries } from '../imageContents.ts';

// Debian's busybox-static and the node's own Node.js binary: one static, one dynamic ELF.
const staticBusybox = '/bin/busybox';

test('a statically linked executable names no interpreter', { skip: existsSync(staticBusybox) ? false : 'needs busybox-static' }, () => {
  assert.equal(elfInterpreter(staticBusybox), undefined);
});

test('a dynamically linked executable names the x86-64 loader', () => {
  assert.equal(elfInterpreter(process.execPath), '/lib64/ld-linux-x86-64.so.2');
});

test('a file that is not ELF is refused by name', () => {
  const dir = mkdtempSync(join(tmpdir(), 'elf-'));
  try {
    const file = join(dir, 'script');
    writeFileSync(file, '#!/bin/sh\n'.padEnd(128, ' '));
    assert.throws(() => elfInterpreter(file), /script is not an ELF file/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test('a static executable is packed with no libraries, without asking the loader', {
  skip: existsSync(staticBusybox) ? false : 'needs busybox-static',
}, () => {
  // The loader is never run: with it, this would fail (`ld.so --list` exits 139 on a static file).
  assert.deepEqual(neededLibraries('/', staticBusybox.slice(1)), []);
});
