import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  decodeWorkloadRequest,
  decodeWorkloadResponse,
  decodeZdsHello,
  encodeWorkloadRequest,
  encodeWorkloadResponse,
  encodeZdsHello,
  zdsRoot,
} from '@istio-cni/dataplane';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

test('schema: package, messages and field numbers are those of zds.proto', () => {
  const fields = (name: string) =>
    Object.fromEntries(Object.values(zdsRoot().lookupType(`istio.workload.zds.${name}`).fields).map((f) => [f.name, `${f.id}:${f.type}`]));
  assert.deepEqual(fields('ZdsHello'), { version: '1:Version' });
  assert.deepEqual(fields('WorkloadInfo'), { name: '1:string', namespace: '2:string', service_account: '3:string' });
  assert.deepEqual(zdsRoot().lookupType('istio.workload.zds.WorkloadInfo').reserved, [[4, 4], 'trust_domain']);
  assert.deepEqual(fields('AddWorkload'), { uid: '1:string', workload_info: '2:WorkloadInfo' });
  assert.deepEqual(fields('KeepWorkload'), { uid: '1:string' });
  assert.deepEqual(fields('DelWorkload'), { uid: '2:string' });
  assert.deepEqual(fields('SnapshotSent'), {});
  assert.deepEqual(fields('Ack'), { error: '1:string' });
  assert.deepEqual(fields('WorkloadRequest'), {
    add: '1:AddWorkload',
    keep: '5:KeepWorkload',
    del: '2:DelWorkload',
    snapshot_sent: '3:SnapshotSent',
  });
  assert.deepEqual(zdsRoot().lookupType('istio.workload.zds.WorkloadRequest').oneofs.payload?.oneof, [
    'add',
    'keep',
    'del',
    'snapshot_sent',
  ]);
  assert.deepEqual(fields('WorkloadResponse'), { ack: '1:Ack' });
  assert.deepEqual(zdsRoot().lookupEnum('istio.workload.zds.Version').values, { NOT_USED: 0, V1: 1 });
});

// Expected bytes are what Go's proto.Marshal writes for the same messages (proto3: defaults omitted).
test('requests encode byte for byte like the Go marshaller', () => {
  assert.equal(
    hex(encodeWorkloadRequest({ add: { uid: 'u1', workload_info: { name: 'n', namespace: 'ns', service_account: 'sa' } } })),
    '0a11' + '0a027531' + '120b' + '0a016e' + '12026e73' + '1a027361',
  );
  assert.equal(hex(encodeWorkloadRequest({ keep: { uid: 'k' } })), '2a03' + '0a016b');
  assert.equal(hex(encodeWorkloadRequest({ del: { uid: 'abc' } })), '1205' + '1203616263');
  assert.equal(hex(encodeWorkloadRequest({ snapshot_sent: {} })), '1a00');
  assert.equal(
    hex(encodeWorkloadRequest({ add: { uid: 'u', workload_info: { name: '', namespace: 'ns', service_account: '' } } })),
    '0a09' + '0a0175' + '1204' + '12026e73',
  );
});

test('responses and hello round-trip', () => {
  assert.equal(hex(encodeWorkloadResponse({ ack: { error: '' } })), '0a00');
  assert.deepEqual(decodeWorkloadResponse(Buffer.from('0a00', 'hex')), { ack: { error: '' } });
  assert.deepEqual(decodeWorkloadResponse(encodeWorkloadResponse({ ack: { error: 'boom' } })), { ack: { error: 'boom' } });
  assert.deepEqual(decodeWorkloadResponse(new Uint8Array()), {});
  assert.equal(hex(encodeZdsHello({ version: 1 })), '0801');
  assert.deepEqual(decodeZdsHello(Buffer.from('0801', 'hex')), { version: 1 });
  assert.deepEqual(decodeZdsHello(new Uint8Array()), { version: 0 });
});

test('requests decode back (the fake ztunnel side)', () => {
  for (const request of [
    { add: { uid: 'u1', workload_info: { name: 'n', namespace: 'ns', service_account: 'sa' } } },
    { keep: { uid: 'k' } },
    { del: { uid: 'd' } },
    { snapshot_sent: {} },
  ] as const) {
    assert.deepEqual(decodeWorkloadRequest(encodeWorkloadRequest(request)), request);
  }
});

test('garbage does not decode', () => {
  assert.throws(() => decodeZdsHello(Buffer.from('garbage!!')));
  assert.throws(() => decodeWorkloadResponse(Buffer.from([0xff, 0xff])));
  assert.throws(() => decodeWorkloadRequest(new Uint8Array()), /0 payloads/);
});
