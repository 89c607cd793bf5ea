import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it, type TestContext } from 'node:test';
import {
  KubeApiError,
  ProtobufError,
  createKubeClient,
  decodeMessage,
  decodeWatchFrame,
  messageSchema,
  projectJson,
  type WatchEvent,
} from '../src/index.ts';
import { WireReader } from '../src/protobuf/wireReader.ts';
import { envelope, message, varint, watchFrame } from '../../../test/support/protobufEncode.ts';

const meta = messageSchema({
  1: { name: 'name', kind: 'string' },
  6: { name: 'resourceVersion', kind: 'string' },
  9: { name: 'deletionTimestamp', kind: 'time' },
  12: { name: 'annotations', kind: 'map' },
});
const thing = messageSchema({
  1: { name: 'metadata', kind: 'message', schema: meta },
  2: { name: 'args', kind: 'string', repeated: true },
  3: { name: 'uid', kind: 'int', keepZero: true },
  4: { name: 'count', kind: 'int' },
  5: { name: 'on', kind: 'bool' },
  6: { name: 'items', kind: 'message', repeated: true, schema: messageSchema({ 1: { name: 'ip', kind: 'string', keepZero: true } }) },
});
const THING = { kind: 'Thing', schema: thing };

describe('protobuf wire reader', () => {
  it('reads varints exactly up to 2^53 and sign-extended negatives as negative', () => {
    for (const n of [0, 1, 127, 128, 300, 2 ** 31, 2 ** 32 + 5, 2 ** 49 + 1, 2 ** 53 - 1]) {
      assert.equal(new WireReader(varint(n)).varint(), n);
    }
    assert.equal(new WireReader(varint(-1)).varint(), -1);
    assert.equal(new WireReader(varint(-126)).int32(), -126);
    assert.equal(varint(-1).length, 10);
  });

  it('throws a ProtobufError on truncation, overlong varints and lengths past the end', () => {
    assert.throws(() => new WireReader(Buffer.from([0x80])).varint(), ProtobufError);
    assert.throws(() => new WireReader(Buffer.alloc(11, 0xff)).varint(), ProtobufError);
    assert.throws(() => decodeMessage(thing, Buffer.from([0x12, 0x05, 0x61])), ProtobufError);
    assert.throws(() => decodeMessage(thing, Buffer.from([0x00])), ProtobufError, 'field number 0');
    assert.throws(() => decodeMessage(thing, Buffer.from([0x0b])), ProtobufError, 'group wire type');
  });
});

describe('message schema', () => {
  it('decodes only the listed fields, skipping others of every wire type', () => {
    const buf = Buffer.concat([
      message([
        [
          1,
          [
            [1, 'p'],
            [6, '42'],
            [7, 99],
            [
              12,
              [
                [1, 'a'],
                [2, 'b'],
              ],
            ],
            [
              12,
              [
                [1, 'c'],
                [2, ''],
              ],
            ],
          ],
        ],
        [2, 'x'],
        [2, 'y'],
        [99, 'skipped'],
        [100, 5],
        [6, [[1, '10.0.0.1']]],
        [6, [[1, 'fd00::1']]],
      ]),
      Buffer.from([0x39, 1, 2, 3, 4, 5, 6, 7, 8]), // field 7, fixed64
      Buffer.from([0x45, 1, 2, 3, 4]), // field 8, fixed32
    ]);
    assert.deepEqual(decodeMessage(thing, buf), {
      metadata: { name: 'p', resourceVersion: '42', annotations: { a: 'b', c: '' } },
      args: ['x', 'y'],
      items: [{ ip: '10.0.0.1' }, { ip: 'fd00::1' }],
    });
  });

  it('leaves out zeros Go JSON omits, keeps those of pointer and non-omitempty fields', () => {
    const buf = message([
      [3, 0],
      [4, 0],
      [5, false],
      [1, [[1, '']]],
    ]);
    assert.deepEqual(decodeMessage(thing, buf), { uid: 0, metadata: {} });
    assert.deepEqual(projectJson(thing, { uid: 0, count: 0, on: false, metadata: { name: '' } }), { uid: 0, metadata: {} });
  });

  it('writes times as metav1.Time does in JSON, and leaves the zero time out', () => {
    const at = Date.UTC(2026, 11, 5, 13, 11, 49) / 1000;
    assert.deepEqual(
      decodeMessage(
        meta,
        message([
          [
            9,
            [
              [1, at],
              [2, 500],
            ],
          ],
        ]),
      ),
      { deletionTimestamp: '2026-12-05T13:11:49Z' },
    );
    assert.deepEqual(decodeMessage(meta, message([[9, []]])), {});
    assert.throws(() => decodeMessage(meta, message([[9, [[1, 2 ** 50]]]])), ProtobufError);
  });

  it('keeps a map key named __proto__ as data', () => {
    const decoded = decodeMessage(
      meta,
      message([
        [
          12,
          [
            [1, '__proto__'],
            [2, 'v'],
          ],
        ],
      ]),
    ) as { annotations: Record<string, string> };
    assert.equal(Object.getPrototypeOf(decoded.annotations), Object.prototype);
    assert.deepEqual(Object.keys(decoded.annotations), ['__proto__']);
    const projected = projectJson(meta, JSON.parse('{"annotations":{"__proto__":"v"}}')) as { annotations: Record<string, string> };
    assert.deepEqual(Object.keys(projected.annotations), ['__proto__']);
  });

  it('refuses a field sent with another wire type than its kind', () => {
    assert.throws(() => decodeMessage(thing, message([[4, 'not a number']])), /field count: wire type 2/);
    assert.throws(() => decodeMessage(thing, message([[2, 7]])), /field args: wire type 0/);
    assert.throws(() => decodeMessage(thing, Buffer.from([0x12, 0x02, 0xc3, 0x28])), /not UTF-8/);
  });

  it('projects JSON by the same rules, dropping values of the wrong type', () => {
    assert.deepEqual(
      projectJson(thing, {
        metadata: { name: 'p', generateName: 'dropped', annotations: { a: 'b', n: 1 }, deletionTimestamp: '2026-12-05T13:11:49Z' },
        args: ['x', 2, 'y'],
        uid: '0',
        count: 3,
        on: 'true',
        items: [{ ip: '10.0.0.1', extra: 1 }, 'junk'],
        managedFields: [{}],
      }),
      {
        metadata: { name: 'p', deletionTimestamp: '2026-12-05T13:11:49Z', annotations: { a: 'b' } },
        args: ['x', 'y'],
        count: 3,
        items: [{ ip: '10.0.0.1' }],
      },
    );
  });
});

describe('protobuf watch frames', () => {
  const thingBytes = message([
    [
      1,
      [
        [1, 'p'],
        [6, '7'],
      ],
    ],
  ]);

  it('decodes an event of the expected kind, refuses another kind and a missing envelope', () => {
    const frame = watchFrame('ADDED', envelope('Thing', thingBytes)).subarray(4);
    assert.deepEqual(decodeWatchFrame(frame, THING), { type: 'ADDED', object: { metadata: { name: 'p', resourceVersion: '7' } } });
    assert.throws(() => decodeWatchFrame(watchFrame('ADDED', envelope('Secret', thingBytes)).subarray(4), THING), /"Secret", not a Thing/);
    assert.throws(() => decodeWatchFrame(watchFrame('ADDED', thingBytes).subarray(4), THING), /magic/);
    const gzipped = Buffer.concat([
      Buffer.from('k8s\0', 'latin1'),
      message([
        [1, [[2, 'Thing']]],
        [2, thingBytes],
        [3, 'gzip'],
      ]),
    ]);
    assert.throws(() => decodeWatchFrame(watchFrame('ADDED', gzipped).subarray(4), THING), /content encoding "gzip"/);
  });

  it('decodes the Status of an ERROR event', () => {
    const status = envelope(
      'Status',
      message([
        [2, 'Failure'],
        [3, 'too old resource version: 1 (200)'],
        [4, 'Expired'],
        [6, 410],
      ]),
    );
    assert.deepEqual(decodeWatchFrame(watchFrame('ERROR', status).subarray(4), THING), {
      type: 'ERROR',
      status: { message: 'too old resource version: 1 (200)', reason: 'Expired', code: 410 },
    });
  });
});

async function serve(t: TestContext, handler: (res: ServerResponse, accept: string) => void): Promise<string> {
  const server: Server = createServer((req, res) => handler(res, String(req.headers.accept)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  server.on('connection', (s) => t.after(() => s.destroy()));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function client(url: string) {
  return createKubeClient({ server: new URL(url), token: () => undefined, invalidateToken: () => {} } as unknown as Parameters<
    typeof createKubeClient
  >[0]);
}

/** Writes `bytes` one byte per turn of the event loop, then ends the response. */
async function trickle(res: ServerResponse, bytes: Buffer): Promise<void> {
  for (const b of bytes) {
    res.write(Buffer.from([b]));
    await new Promise((r) => setImmediate(r));
  }
  res.end();
}

describe('kube client watch in protobuf', () => {
  it('asks for protobuf and reassembles frames split anywhere', async (t) => {
    let asked = '';
    const frames = Buffer.concat([
      watchFrame(
        'ADDED',
        envelope(
          'Thing',
          message([
            [
              1,
              [
                [1, 'a'],
                [6, '1'],
              ],
            ],
            [2, 'x'],
          ]),
        ),
      ),
      watchFrame(
        'MODIFIED',
        envelope(
          'Thing',
          message([
            [
              1,
              [
                [1, 'a'],
                [6, '2'],
              ],
            ],
            [99, Buffer.alloc(3000, 1)],
          ]),
        ),
      ),
      watchFrame(
        'BOOKMARK',
        envelope(
          'Thing',
          message([
            [
              1,
              [
                [6, '3'],
                [
                  12,
                  [
                    [1, 'k8s.io/initial-events-end'],
                    [2, 'true'],
                  ],
                ],
              ],
            ],
          ]),
        ),
      ),
    ]);
    const url = await serve(t, (res, accept) => {
      asked = accept;
      res.writeHead(200, { 'content-type': 'application/vnd.kubernetes.protobuf;stream=watch' });
      void trickle(res, frames);
    });
    const events: WatchEvent[] = [];
    await client(url).watch('/api/v1/things', {}, (e) => events.push(e), 10_000, { protobuf: THING }).done;
    assert.match(asked, /^application\/vnd\.kubernetes\.protobuf, application\/json$/);
    assert.deepEqual(events, [
      { type: 'ADDED', object: { metadata: { name: 'a', resourceVersion: '1' }, args: ['x'] } },
      { type: 'MODIFIED', object: { metadata: { name: 'a', resourceVersion: '2' } } },
      { type: 'BOOKMARK', object: { metadata: { resourceVersion: '3', annotations: { 'k8s.io/initial-events-end': 'true' } } } },
    ]);
  });

  it('projects a JSON answer onto the same fields', async (t) => {
    const url = await serve(t, (res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        `${JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'a', resourceVersion: '1', managedFields: [{}] }, args: ['x'], spec: {} } })}\n`,
      );
    });
    const events: WatchEvent[] = [];
    await client(url).watch('/api/v1/things', {}, (e) => events.push(e), 10_000, { protobuf: THING }).done;
    assert.deepEqual(events, [{ type: 'ADDED', object: { metadata: { name: 'a', resourceVersion: '1' }, args: ['x'] } }]);
  });

  it('fails on an ERROR event with its Status, and on a malformed or oversized frame', async (t) => {
    const status = envelope(
      'Status',
      message([
        [3, 'too old resource version'],
        [4, 'Expired'],
        [6, 410],
      ]),
    );
    const bodies = [watchFrame('ERROR', status), Buffer.from([0, 0, 0, 2, 0x0a, 0x7f]), Buffer.from([0xff, 0xff, 0xff, 0xff])];
    let i = 0;
    const url = await serve(t, (res) => {
      res.writeHead(200, { 'content-type': 'application/vnd.kubernetes.protobuf;stream=watch' });
      res.write(bodies[i++]);
    });
    const watch = () => client(url).watch('/api/v1/things', {}, () => {}, 10_000, { protobuf: THING }).done;
    await assert.rejects(
      watch(),
      (err: unknown) => err instanceof KubeApiError && err.code === 410 && err.reason === 'Expired' && /too old/.test(err.message),
    );
    await assert.rejects(watch(), /malformed event: length past the end/);
    await assert.rejects(watch(), /event exceeds/);
  });

  it('reads a protobuf Status answer as the error it is', async (t) => {
    const url = await serve(t, (res) => {
      res.writeHead(422, { 'content-type': 'application/vnd.kubernetes.protobuf' });
      res.end(
        envelope(
          'Status',
          message([
            [3, 'sendInitialEvents is forbidden'],
            [4, 'Invalid'],
            [6, 422],
          ]),
        ),
      );
    });
    await assert.rejects(
      client(url).watch('/api/v1/things', {}, () => {}, 10_000, { protobuf: THING }).done,
      (err: unknown) =>
        err instanceof KubeApiError &&
        err.code === 422 &&
        err.reason === 'Invalid' &&
        /HTTP 422: sendInitialEvents is forbidden$/.test(err.message),
    );
  });
});
