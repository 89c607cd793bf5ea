import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createJsonLogger } from '@istio-cni/handoff';
import type { JsonPatchOp, NodeTaintApi, Taint } from '../src/taint/nodeTaintApi.ts';
import { createNodeTaintRemover } from '../src/taint/nodeTaintRemover.ts';
import { resolveSettings } from '../src/settings/settings.ts';

const KEY = 'cni.istio.io/not-ready';
const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

/** A node's taints with RFC 6902 test/remove semantics, recording every call. */
function fakeNode(initial: Taint[], opts: { failPatches?: number; beforePatch?: (taints: Taint[]) => void } = {}) {
  let taints = [...initial];
  const calls: string[] = [];
  let failPatches = opts.failPatches ?? 0;
  let patched: () => void = () => {};
  const api: NodeTaintApi = {
    async getTaints(name) {
      calls.push(`GET ${name}`);
      return taints.map((t) => ({ ...t }));
    },
    async patchNode(name, ops: readonly JsonPatchOp[]) {
      calls.push(`PATCH ${name} ${JSON.stringify(ops)}`);
      opts.beforePatch?.(taints);
      if (failPatches > 0) {
        failPatches--;
        throw new Error('etcdserver: request timed out');
      }
      const next = [...taints];
      for (const op of ops) {
        const m = /^\/spec\/taints\/(\d+)(?:\/(key|effect))?$/.exec(op.path);
        assert.ok(m, `unexpected path ${op.path}`);
        const i = Number(m[1]);
        if (op.op === 'test') {
          const field = m[2] as 'key' | 'effect';
          if (next[i]?.[field] !== op.value) throw new Error(`the server rejected our request: test operation for path ${op.path} failed`);
        } else next.splice(i, 1);
      }
      taints = next;
      patched();
    },
  };
  return {
    api,
    calls,
    taints: () => taints,
    nextPatch: () => new Promise<void>((r) => (patched = r)),
  };
}

const notReady: Taint = { key: KEY, effect: 'NoSchedule' };
const other: Taint = { key: 'dedicated', value: 'infra', effect: 'NoSchedule' };

describe('node readiness taint remover', () => {
  it('does nothing before the daemon is ready, then removes the taint exactly once', async () => {
    const node = fakeNode([other, notReady]);
    const remover = createNodeTaintRemover({ api: node.api, nodeName: 'node-a', taintKey: KEY, logger, retryDelayMs: 1 });
    remover.readinessChanged(false);
    remover.readinessChanged(false);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(node.calls, [], 'no API call before readiness');
    remover.readinessChanged(true);
    assert.equal(await remover.done, 'removed');
    assert.deepEqual(node.taints(), [other], 'only the readiness taint is gone');
    assert.deepEqual(node.calls, [
      'GET node-a',
      `PATCH node-a ${JSON.stringify([
        { op: 'test', path: '/spec/taints/1/key', value: KEY },
        { op: 'test', path: '/spec/taints/1/effect', value: 'NoSchedule' },
        { op: 'remove', path: '/spec/taints/1' },
      ])}`,
    ]);
    // Readiness flapping afterwards never touches the node again (and never adds the taint).
    remover.readinessChanged(false);
    remover.readinessChanged(true);
    await new Promise((r) => setImmediate(r));
    assert.equal(node.calls.length, 2);
  });

  it('a node without the taint is left alone', async () => {
    const node = fakeNode([other, { key: KEY, effect: 'NoExecute' }]);
    const remover = createNodeTaintRemover({ api: node.api, nodeName: 'node-a', taintKey: KEY, logger });
    remover.readinessChanged(true);
    assert.equal(await remover.done, 'absent');
    assert.deepEqual(node.calls, ['GET node-a']);
    assert.equal(node.taints().length, 2);
  });

  it('a concurrent change to the taints fails the test op; the retry removes the right entry', async () => {
    let raced = false;
    const node = fakeNode([notReady, other], {
      beforePatch: (taints) => {
        if (raced) return;
        raced = true;
        taints.unshift({ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' });
      },
    });
    const remover = createNodeTaintRemover({ api: node.api, nodeName: 'node-a', taintKey: KEY, logger, retryDelayMs: 1 });
    remover.readinessChanged(true);
    assert.equal(await remover.done, 'removed');
    assert.deepEqual(
      node.taints().map((t) => t.key),
      ['node.kubernetes.io/unreachable', 'dedicated'],
    );
    assert.deepEqual(node.calls.filter((c) => c.startsWith('GET')).length, 2);
  });

  it('API errors are retried while ready, and the retry waits when readiness is lost', async () => {
    const node = fakeNode([notReady], { failPatches: 1 });
    const remover = createNodeTaintRemover({ api: node.api, nodeName: 'node-a', taintKey: KEY, logger, retryDelayMs: 1 });
    remover.readinessChanged(true);
    remover.readinessChanged(false); // lost before the retry fires
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(node.calls.length, 2, 'no retry while not ready');
    const patched = node.nextPatch();
    remover.readinessChanged(true);
    await patched;
    assert.equal(await remover.done, 'removed');
    assert.deepEqual(node.taints(), []);
  });

  it('stop() ends it without touching the node', async () => {
    const node = fakeNode([notReady]);
    const remover = createNodeTaintRemover({ api: node.api, nodeName: 'node-a', taintKey: KEY, logger });
    remover.stop();
    remover.readinessChanged(true);
    assert.equal(await remover.done, 'stopped');
    assert.deepEqual(node.calls, []);
  });
});

describe('node taint settings', () => {
  it('off by default with the documented key', () => {
    const s = resolveSettings({}, {}, { hostname: () => 'h' });
    assert.deepEqual(s.nodeTaint, { enabled: false, key: KEY });
  });

  it('NODE_TAINT_ENABLED and NODE_TAINT_KEY from env; a bad key is an error naming it', () => {
    assert.deepEqual(
      resolveSettings({}, { NODE_TAINT_ENABLED: 'true', NODE_TAINT_KEY: 'example.com/cni' }, { hostname: () => 'h' }).nodeTaint,
      {
        enabled: true,
        key: 'example.com/cni',
      },
    );
    assert.throws(
      () => resolveSettings({}, { NODE_TAINT_ENABLED: 'true', NODE_TAINT_KEY: 'bad key!' }, { hostname: () => 'h' }),
      /invalid NODE_TAINT_KEY "bad key!"/,
    );
  });
});
