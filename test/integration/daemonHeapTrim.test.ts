/**
 * The built `dist/install-cni` hands back heap it grew (HEAP_TRIM_INTERVAL): the collection goes
 * through `--expose-gc` set at run time and a fresh context's `gc`, which the single-executable
 * application (embedded flags, code cache) must allow. 3000 pods listed by the agent's informer grow
 * its heap well past the 1 MiB threshold, and their listing leaves garbage a trim hands back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { namespaceObject, plainPod } from '../support/meshPods.ts';
import { startAgentRig } from '../support/startAgentRig.ts';

const PODS = 3000;

describe('dist/install-cni heap trims', () => {
  it('collects once its heap grew, hands memory back, and keeps serving', async () => {
    const rig = await startAgentRig({ HEAP_TRIM_INTERVAL: '1s' });
    try {
      rig.api.upsertNamespace(namespaceObject('default'));
      for (let i = 0; i < PODS; i++) rig.api.upsertPod(plainPod('default', `heap-${i}`));
      const trim = await rig.daemon.waitForLog((e) => e.msg === 'heap trimmed', 30_000);
      assert.equal(typeof trim.ms, 'number');
      assert.ok(Number(trim.afterMiB) < Number(trim.committedMiB), `the trim handed nothing back: ${JSON.stringify(trim)}`);
      const ready = await fetch(`http://127.0.0.1:${rig.daemon.readinessPort}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(rig.daemon.child.exitCode, null);
    } finally {
      await rig.close();
    }
  });
});
