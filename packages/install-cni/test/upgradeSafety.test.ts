import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { shouldKeepOnShutdown, type DaemonSetLookup, type DaemonSetState } from '../src/installer/upgradeSafety.ts';

function lookup(...answers: (DaemonSetState | Error)[]): DaemonSetLookup & { calls: number } {
  const l = {
    calls: 0,
    async lookup(): Promise<DaemonSetState> {
      const a = answers[Math.min(l.calls++, answers.length - 1)]!;
      if (a instanceof Error) throw a;
      return a;
    },
  };
  return l;
}

const present = (targetsThisNode: boolean, deleting = false): DaemonSetState => ({ kind: 'present', deleting, targetsThisNode });
const base = { ambientEnabled: true, disableSafeUpgrade: false, ownedConfig: false, retryDelayMs: 1 };

describe('upgrade-safe shutdown decision (upstream ShouldStopCleanup)', () => {
  it('keeps everything while the DaemonSet still targets this node', async () => {
    assert.equal(await shouldKeepOnShutdown({ ...base, lookup: lookup(present(true)) }), true);
  });
  it('cleans up when the DaemonSet no longer targets the node, is deleting, gone or forbidden', async () => {
    for (const s of [present(false), present(true, true), { kind: 'not-found' } as const, { kind: 'unauthorized' } as const]) {
      assert.equal(await shouldKeepOnShutdown({ ...base, lookup: lookup(s) }), false, JSON.stringify(s));
    }
  });
  it('is off without ambient or with AMBIENT_DISABLE_SAFE_UPGRADE, and never asks the API then', async () => {
    const l = lookup(present(true));
    assert.equal(await shouldKeepOnShutdown({ ...base, ambientEnabled: false, lookup: l }), false);
    assert.equal(await shouldKeepOnShutdown({ ...base, disableSafeUpgrade: true, lookup: l }), false);
    assert.equal(l.calls, 0);
  });
  it('normal config: one attempt, default cleanup on error', async () => {
    const l = lookup(new Error('timeout'), present(true));
    assert.equal(await shouldKeepOnShutdown({ ...base, lookup: l }), false);
    assert.equal(l.calls, 1);
  });
  it('owned config: up to three attempts, default keep', async () => {
    const failing = lookup(new Error('a'), new Error('b'), new Error('c'));
    assert.equal(await shouldKeepOnShutdown({ ...base, ownedConfig: true, lookup: failing }), true);
    assert.equal(failing.calls, 3);
    const recovers = lookup(new Error('a'), { kind: 'not-found' });
    assert.equal(await shouldKeepOnShutdown({ ...base, ownedConfig: true, lookup: recovers }), false);
    assert.equal(recovers.calls, 2);
  });
});
