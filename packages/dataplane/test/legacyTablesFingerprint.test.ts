import assert from 'node:assert/strict';
import { test } from 'node:test';
import { zeroEntryCounters } from '@istio-cni/dataplane';

/** An `ipt_get_entries` blob: a 40-byte header, then entries of `sizes` bytes with counters set to 0xff. */
function blob(sizes: number[]): Buffer {
  const b = Buffer.alloc(40 + sizes.reduce((a, s) => a + s, 0), 0xab);
  let at = 40;
  for (const size of sizes) {
    b.writeUInt16LE(size, at + 90); // next_offset
    b.fill(0xff, at + 96, at + 112); // counters
    at += size;
  }
  return b;
}

test('only the counters of each entry are zeroed, whatever the entry sizes', () => {
  const b = zeroEntryCounters(blob([152, 200]));
  for (const at of [40, 192]) assert.deepEqual([...b.subarray(at + 96, at + 112)], new Array(16).fill(0));
  assert.equal(
    b.subarray(0, 40 + 96).every((x) => x === 0xab || x === 152 || x === 0),
    true,
  );
  assert.equal(b.readUInt16LE(40 + 90), 152, 'next_offset kept');
  assert.equal(b[40 + 112], 0xab, 'the match and target data kept');
});

test('a malformed entry (next_offset 0) is an error, not a loop', () => {
  const b = blob([152]);
  b.writeUInt16LE(0, 40 + 90);
  assert.throws(() => zeroEntryCounters(b), /next_offset 0/);
});

test('IPv6 entries (ip6t_entry) have next_offset at 142 and their counters at 152', () => {
  const b = Buffer.alloc(40 + 168 + 200, 0xab);
  for (const [at, size] of [
    [40, 168],
    [208, 200],
  ] as const) {
    b.writeUInt16LE(size, at + 142);
    b.fill(0xff, at + 152, at + 168);
  }
  zeroEntryCounters(b, 'ipv6');
  for (const at of [40, 208]) {
    assert.deepEqual([...b.subarray(at + 152, at + 168)], new Array(16).fill(0));
    assert.equal(b[at + 151], 0xab, 'the bytes before the counters kept');
  }
  assert.equal(b[208 + 168], 0xab, 'the match and target data kept');
});
