import assert from 'node:assert/strict';
import { test } from 'node:test';
import { lockedInodes } from './firstUseArtefacts.ts';

test('lockedInodes: the inode of every lock and waiter in /proc/locks', () => {
  const procLocks = [
    '1: FLOCK  ADVISORY  WRITE 4242 00:1a:1093 0 EOF',
    '1: -> FLOCK  ADVISORY  WRITE 4243 00:1a:1093 0 EOF',
    '2: POSIX  ADVISORY  READ 77 fd:01:655362 128 128',
    '',
  ].join('\n');
  assert.deepEqual(
    [...lockedInodes(procLocks)].sort((a, b) => a - b),
    [1093, 655362],
  );
  assert.equal(lockedInodes('').size, 0);
});
