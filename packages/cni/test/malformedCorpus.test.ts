import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dispatch, LATEST_VERSION } from '@istio-cni/cni';
import { fakePlugin, totalCalls } from './fakePlugin.ts';
import { malformedCorpus } from './malformedCorpus.ts';

describe('malformed-input corpus through dispatch', () => {
  it('has at least 100 cases with unique names', () => {
    assert.ok(malformedCorpus.length >= 100, `only ${malformedCorpus.length} cases`);
    assert.equal(new Set(malformedCorpus.map((c) => c.name)).size, malformedCorpus.length);
  });

  for (const c of malformedCorpus) {
    it(`${c.name} → code ${c.code}`, async () => {
      const plugin = fakePlugin();
      const out = await dispatch(c.env, c.stdin, plugin, 'CNI plugin test');
      assert.equal(out.exitCode, 1, `stdout: ${out.stdout.slice(0, 500)}`);
      assert.equal(totalCalls(plugin), 0, 'no handler may run');
      const err = JSON.parse(out.stdout) as Record<string, unknown>;
      assert.equal(err['code'], c.code, out.stdout.slice(0, 500));
      assert.equal(typeof err['msg'], 'string');
      assert.ok((err['msg'] as string).length > 0);
      if (c.msg !== undefined)
        assert.ok((err['msg'] as string).includes(c.msg), `msg ${JSON.stringify(err['msg'])} lacks ${JSON.stringify(c.msg)}`);
      assert.equal(typeof err['cniVersion'], 'string');
      assert.deepEqual(Object.keys(err).slice(0, 3), ['cniVersion', 'code', 'msg']);
      assert.doesNotMatch(out.stdout, /\n\s+at /, 'no stack trace');
      assert.ok(out.stdout.length < 20000, 'error output stays small even for huge input');
      assert.equal(out.stderr, '');
      void LATEST_VERSION;
    });
  }
});
