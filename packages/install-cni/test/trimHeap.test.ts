import assert from 'node:assert/strict';
import { it } from 'node:test';
import { runInNewContext } from 'node:vm';
import { trimHeap } from '../src/agent/trimHeap.ts';

it('trimHeap exposes V8 gc on first use and schedules a collection without throwing', () => {
  assert.throws(() => runInNewContext('gc'), /gc is not defined/, 'not exposed before');
  trimHeap();
  trimHeap();
  assert.equal(typeof runInNewContext('gc'), 'function');
});
