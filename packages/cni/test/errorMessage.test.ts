import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorMessage } from '@istio-cni/cni';

test('errorMessage: an Error gives its message only, anything else its text', () => {
  assert.equal(errorMessage(new TypeError('bad input')), 'bad input');
  assert.equal(errorMessage('plain text'), 'plain text');
  assert.equal(errorMessage(42), '42');
  assert.equal(errorMessage(undefined), 'undefined');
});
