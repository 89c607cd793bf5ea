import assert from 'node:assert/strict';
import { test } from 'node:test';
import { getGenRequest, parseGenReply } from '../src/nftGeneration.ts';

test('GETGEN request: nlmsghdr for NFNL_SUBSYS_NFTABLES/NFT_MSG_GETGEN with an AF_UNSPEC nfgenmsg', () => {
  const b = getGenRequest(7);
  assert.equal(b.length, 20);
  assert.equal(b.readUInt32LE(0), 20, 'nlmsg_len');
  assert.equal(b.readUInt16LE(4), (10 << 8) | 16, 'nlmsg_type');
  assert.equal(b.readUInt16LE(6), 1, 'NLM_F_REQUEST');
  assert.equal(b.readUInt32LE(8), 7, 'seq');
  assert.deepEqual([...b.subarray(16)], [0, 0, 0, 0], 'nfgenmsg');
});

function newGen(attrs: [type: number, payload: Buffer][]): Buffer {
  const body = Buffer.concat(
    attrs.map(([type, payload]) => {
      const len = 4 + payload.length;
      const a = Buffer.alloc((len + 3) & ~3);
      a.writeUInt16LE(len, 0);
      a.writeUInt16LE(type, 2);
      payload.copy(a, 4);
      return a;
    }),
  );
  const head = Buffer.alloc(20);
  head.writeUInt32LE(20 + body.length, 0);
  head.writeUInt16LE((10 << 8) | 15, 4);
  return Buffer.concat([head, body]);
}

const u32be = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

test('NEWGEN reply: the generation is NFTA_GEN_ID (big-endian), wherever it comes among the attributes', () => {
  assert.equal(parseGenReply(newGen([[1, u32be(4242)]])), 4242);
  assert.equal(
    parseGenReply(
      newGen([
        [3, Buffer.from('nft\0\0')],
        [2, u32be(99)],
        [1, u32be(0xfffffffe)],
      ]),
    ),
    0xfffffffe,
  );
});

test('an error reply, another message or a reply without the attribute is refused', () => {
  const err = Buffer.alloc(36);
  err.writeUInt32LE(36, 0);
  err.writeUInt16LE(2, 4);
  err.writeInt32LE(-1, 16);
  assert.throws(() => parseGenReply(err), /netlink error 1/);
  const other = newGen([[1, u32be(1)]]);
  other.writeUInt16LE(3, 4);
  assert.throws(() => parseGenReply(other), /unexpected netlink message type 3/);
  assert.throws(() => parseGenReply(newGen([[2, u32be(5)]])), /no generation/);
  assert.throws(() => parseGenReply(Buffer.alloc(4)), /short/);
});
