import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const makefile = fileURLToPath(new URL('../../../Makefile', import.meta.url));
const fixture = fileURLToPath(new URL('./fixtures/hangingHook.mjs', import.meta.url));

/** The test runner's flags every make target uses (`node_test`), with the per-test timeout set to `timeoutMs`. */
function nodeTestFlags(timeoutMs: number): string[] {
  const line = /^node_test = \$\(NODE\) (.+)$/m.exec(readFileSync(makefile, 'utf8'));
  assert.ok(line?.[1], 'the Makefile defines node_test');
  return line[1].split(/\s+/).map((f) => f.replace('$(1)', String(timeoutMs)));
}

describe("the Makefile's test runner flags", () => {
  it('a test whose cleanup hangs on a live handle fails, named, and its file still ends', () => {
    // The guard only keeps this test from hanging itself if the flags regress: without
    // --test-force-exit the file runs until the guard kills it.
    // Without NODE_TEST_CONTEXT the nested runner reports as a run of its own, not to this one.
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const run = spawnSync(process.execPath, [...nodeTestFlags(1000), fixture], { encoding: 'utf8', env, timeout: 60_000 });
    assert.equal(run.signal, null, `the test runner ended on its own (killed by ${run.signal}):\n${run.stdout}`);
    assert.equal(run.status, 1, run.stdout);
    assert.match(run.stdout, /a test whose cleanup hangs on a live handle[^\n]*\n\s*'test timed out after 1000ms'/);
    assert.match(run.stdout, /✔ a test after it/);
  });
});
