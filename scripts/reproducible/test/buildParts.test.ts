import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { buildPartsOf, differingParts, firstDifference } from '../buildParts.ts';

function scratch(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'build-parts-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function buildDir(root: string, files: Record<string, string>): string {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  return root;
}

describe('what differs between two builds', () => {
  it('firstDifference: equal, a differing byte, one a prefix of the other', () => {
    assert.equal(firstDifference(Buffer.from('abc'), Buffer.from('abc')), -1);
    assert.equal(firstDifference(Buffer.from('abc'), Buffer.from('abd')), 2);
    assert.equal(firstDifference(Buffer.from('ab'), Buffer.from('abc')), 2);
  });

  it("an executable's parts are its own build files, and the plugin's bytecode order", (t) => {
    const dir = buildDir(scratch(t), {
      'install-cni.cache': 'c',
      'install-cni-loader.cjs': 'l',
      'istio-cni.cjs': 'p',
      'bun-order/0.order': 'o',
    });
    assert.deepEqual(buildPartsOf('install-cni', dir), ['install-cni-loader.cjs', 'install-cni.cache']);
    assert.deepEqual(buildPartsOf('istio-cni', dir), ['bun-order/0.order', 'istio-cni.cjs']);
  });

  it('names the code cache when only it differs, with sizes and the first differing byte', (t) => {
    const root = scratch(t);
    const a = buildDir(join(root, 'a'), { 'install-cni.cjs': 'bundle', 'install-cni.cache': 'cache-1' });
    const b = buildDir(join(root, 'b'), { 'install-cni.cjs': 'bundle', 'install-cni.cache': 'cache-22' });
    writeFileSync(join(root, 'exe-a'), 'xxcache-1');
    writeFileSync(join(root, 'exe-b'), 'xxcache-22');
    assert.deepEqual(differingParts('install-cni', a, b, join(root, 'exe-a'), join(root, 'exe-b')), [
      'build/install-cni.cache: differs (7 / 8 bytes, first at byte 6)',
      'executable: 9 / 10 bytes, first difference at byte 8',
    ]);
  });

  it('says when every intermediate is identical, and names a part only one build has', (t) => {
    const root = scratch(t);
    const a = buildDir(join(root, 'a'), { 'install-cni.cjs': 'bundle' });
    const b = buildDir(join(root, 'b'), { 'install-cni.cjs': 'bundle' });
    writeFileSync(join(root, 'exe-a'), 'A');
    writeFileSync(join(root, 'exe-b'), 'B');
    assert.deepEqual(differingParts('install-cni', a, b, join(root, 'exe-a'), join(root, 'exe-b')), [
      'every intermediate file is identical: the difference is in the final packing',
      'executable: 1 / 1 bytes, first difference at byte 0',
    ]);
    writeFileSync(join(b, 'install-cni.warm.cache'), 'w');
    assert.deepEqual(
      differingParts('install-cni', a, b, join(root, 'exe-a'), join(root, 'exe-b'))[0],
      'build/install-cni.warm.cache: only in the second build',
    );
  });
});
