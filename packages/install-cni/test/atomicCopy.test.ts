import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { atomicCopy } from '../src/installer/atomicWrite.ts';

describe('atomicCopy', () => {
  const dir = mkdtempSync(join(tmpdir(), 'atomic-copy-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('copies every byte of a file larger than one read, in any size, with the given mode', async () => {
    // Not a multiple of the 1 MiB read nor of the 32 KiB write.
    const data = randomBytes(3 * 1024 * 1024 + 12345);
    const src = join(dir, 'plugin-src');
    writeFileSync(src, data, { mode: 0o600 });
    const dst = join(dir, 'plugin');
    await atomicCopy(src, dst, 0o755);
    assert.ok(readFileSync(dst).equals(data));
    assert.equal(statSync(dst).mode & 0o7777, 0o755);
    assert.deepEqual(readdirSync(dir).sort(), ['plugin', 'plugin-src']);
  });

  it('replaces an existing file, and copies an empty one', async () => {
    const src = join(dir, 'empty-src');
    writeFileSync(src, '');
    const dst = join(dir, 'replaced');
    writeFileSync(dst, 'old contents');
    await atomicCopy(src, dst, 0o644);
    assert.equal(readFileSync(dst, 'utf8'), '');
  });

  it('a missing source leaves the target as it was and no temp file', async () => {
    const dst = join(dir, 'kept');
    writeFileSync(dst, 'kept');
    await assert.rejects(atomicCopy(join(dir, 'missing'), dst, 0o755), { code: 'ENOENT' });
    assert.equal(readFileSync(dst, 'utf8'), 'kept');
    assert.ok(!readdirSync(dir).some((n) => n.startsWith('kept.tmp.')));
  });
});
