import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));

/** The test runner's flags every make target uses (`node_test`), with the per-test timeout set to `timeoutMs`. */
function nodeTestFlags(timeoutMs: number): string[] {
  const line = /^node_test = \$\(NODE\) (.+)$/m.exec(readFileSync(`${repo}Makefile`, 'utf8'));
  assert.ok(line?.[1], 'the Makefile defines node_test');
  return line[1].split(/\s+/).map((f) => f.replace('$(1)', String(timeoutMs)).replace('$(CURDIR)/', repo));
}

/** Runs one fixture file as `make test` would; the guard only keeps this test from hanging if the flags regress. */
function runFixture(name: string, timeoutMs = 1000) {
  // Without NODE_TEST_CONTEXT the nested runner reports as a run of its own, not to this one.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  return spawnSync(process.execPath, [...nodeTestFlags(timeoutMs), fixture(name)], {
    encoding: 'utf8',
    env: { ...env, ISTIO_CNI_TEST_FILE_GRACE_MS: '1000' },
    timeout: 60_000,
  });
}

describe("the Makefile's test runner flags", () => {
  it('a test whose cleanup hangs on a live handle fails, named, and its file still ends', () => {
    const run = runFixture('hangingHook.mjs');
    assert.equal(run.signal, null, `the test runner ended on its own (killed by ${run.signal}):\n${run.stdout}`);
    assert.equal(run.status, 1, run.stdout);
    assert.match(run.stdout, /a test whose cleanup hangs on a live handle[^\n]*\n\s*'test timed out after 1000ms'/);
    assert.match(run.stdout, /✔ a test after it/);
  });

  it('a file whose tests pass but leave a live handle is ended and failed, naming the handle', () => {
    const run = runFixture('leftHandle.mjs');
    assert.equal(run.signal, null, `the test runner ended on its own (killed by ${run.signal}):\n${run.stdout}`);
    assert.equal(run.status, 1, run.stdout);
    assert.match(run.stdout, /✔ passes and leaves an interval running/);
    assert.match(`${run.stdout}${run.stderr}`, /test file still running 1000 ms after its last test: ended/);
  });

  it('every test of a file is reported (nothing cut off at exit, as --test-force-exit did)', () => {
    const run = runFixture('manyTests.mjs');
    assert.equal(run.status, 0, run.stdout);
    assert.match(run.stdout, /^ℹ tests 2000$/m);
    assert.match(run.stdout, /^ℹ pass 2000$/m);
  });
});
