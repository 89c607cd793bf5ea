import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { decodeStatusBody, decodeWatchFrame, projectJson, type ProtobufObjectType } from '@istio-cni/kube';
import type { Namespace } from '@istio-cni/capture';
import { NAMESPACE_TYPE, POD_TYPE } from '../src/kube/coreV1Schemas.ts';
import type { RepairPod } from '../src/repair/repairPod.ts';
import { message, watchFrame } from '../../../test/support/protobufEncode.ts';

/** What a real kube-apiserver sent for the same objects in both encodings (test/e2e/fixtures/captureCoreV1.ts). */
const capture = JSON.parse(readFileSync(join(import.meta.dirname, 'fixtures/coreV1/streams.json'), 'utf8')) as {
  kubernetes: string;
  streams: Record<string, { contentType: string; status: number; base64: string }>;
};
const bytes = (name: string) => Buffer.from(capture.streams[name]?.base64 ?? '', 'base64');

function protobufEvents(name: string, type: ProtobufObjectType): unknown[] {
  const b = bytes(name);
  const events: unknown[] = [];
  for (let at = 0; at < b.length; ) {
    const size = b.readUInt32BE(at);
    events.push(decodeWatchFrame(b.subarray(at + 4, at + 4 + size), type));
    at += 4 + size;
  }
  return events;
}

function jsonEvents(name: string, type: ProtobufObjectType): unknown[] {
  return bytes(name)
    .toString('utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { type: string; object: unknown })
    .map((e) => ({ type: e.type, object: projectJson(type.schema, e.object) }));
}

describe(`core/v1 schemas against a real API server (${capture.kubernetes})`, () => {
  it('decode a protobuf pod watch to exactly what the JSON watch of the same pods projects to', () => {
    assert.match(capture.streams['pods.protobuf']?.contentType ?? '', /^application\/vnd\.kubernetes\.protobuf;stream=watch$/);
    const fromProtobuf = protobufEvents('pods.protobuf', POD_TYPE);
    assert.deepEqual(fromProtobuf, jsonEvents('pods.json', POD_TYPE));
    assert.equal(fromProtobuf.length, 5);
  });

  it('keep every field the agent reads, zeros that mean something included', () => {
    const pods = new Map(
      protobufEvents('pods.protobuf', POD_TYPE)
        .map((e) => (e as { object: RepairPod }).object)
        .map((p) => [p.metadata.name, p] as const),
    );
    const sidecar = pods.get('sidecar');
    assert.ok(sidecar);
    assert.equal(sidecar.metadata.namespace, 'capture');
    assert.match(sidecar.metadata.uid ?? '', /^[0-9a-f-]{36}$/);
    assert.match(sidecar.metadata.resourceVersion ?? '', /^\d+$/);
    assert.match(sidecar.metadata.deletionTimestamp ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(sidecar.metadata.labels?.['security.istio.io/tlsMode'], 'istio');
    assert.equal(sidecar.metadata.annotations?.['example.com/unicode'], 'välue ✓');
    assert.equal(sidecar.metadata.annotations?.['empty.example.com/value'], '');
    assert.equal(sidecar.spec?.nodeName, 'node-a');
    assert.equal(sidecar.spec?.serviceAccountName, 'reviews');
    const [init] = sidecar.spec?.initContainers ?? [];
    assert.deepEqual(init, {
      name: 'istio-init',
      args: ['istio-iptables', '-p', '15001'],
      securityContext: { runAsUser: 0, runAsGroup: 0 },
    });
    const proxy = sidecar.spec?.containers?.[1];
    assert.deepEqual(proxy?.env, [{ name: 'ISTIO_META_DNS_CAPTURE', value: 'true' }, { name: 'EMPTY_VALUE' }, { name: 'POD_NAME' }]);
    assert.deepEqual(proxy?.securityContext, { runAsUser: 1337, runAsGroup: 1337 });
    assert.deepEqual(sidecar.status?.podIPs, [{ ip: '10.0.0.7' }, { ip: 'fd00::7' }]);
    assert.equal(sidecar.status?.podIP, '10.0.0.7');
    assert.equal(sidecar.status?.phase, 'Running');
    const [initStatus] = sidecar.status?.initContainerStatuses ?? [];
    assert.deepEqual(initStatus?.state?.terminated, { exitCode: 0, reason: 'Completed' });
    assert.deepEqual(initStatus?.lastState?.terminated, { exitCode: 126, reason: 'Error', message: 'iptables-restore: ünïcode' });
    assert.deepEqual(pods.get('native-sidecar')?.status?.initContainerStatuses?.[0]?.state, {
      waiting: { reason: 'CrashLoopBackOff', message: 'back-off' },
    });
    assert.equal(pods.get('host-network')?.spec?.hostNetwork, true);
    assert.equal(pods.get('pending')?.spec?.nodeName, undefined);
  });

  it('end the initial events with the bookmark the informer waits for', () => {
    const last = protobufEvents('pods.protobuf', POD_TYPE).at(-1) as { type: string; object: RepairPod };
    assert.equal(last.type, 'BOOKMARK');
    assert.equal(last.object.metadata.annotations?.['k8s.io/initial-events-end'], 'true');
    assert.match(last.object.metadata.resourceVersion ?? '', /^\d+$/);
  });

  it('decode a namespace watch the same way', () => {
    const fromProtobuf = protobufEvents('namespaces.protobuf', NAMESPACE_TYPE);
    assert.deepEqual(fromProtobuf, jsonEvents('namespaces.json', NAMESPACE_TYPE));
    const ns = (fromProtobuf[0] as { object: Namespace }).object;
    assert.equal(ns.metadata.labels?.['istio.io/dataplane-mode'], 'ambient');
  });

  it('read a protobuf Status refusal as the JSON one, and an ERROR event carrying it', () => {
    const json = JSON.parse(bytes('refused.json').toString('utf8')) as { message: string; reason: string; code: number };
    const body = bytes('refused.protobuf');
    assert.deepEqual(decodeStatusBody(body), { message: json.message, reason: json.reason, code: json.code });
    assert.equal(json.code, 422);
    const frame = watchFrame('ERROR', body).subarray(4);
    assert.deepEqual(decodeWatchFrame(frame, POD_TYPE), { type: 'ERROR', status: { message: json.message, reason: 'Invalid', code: 422 } });
    assert.equal(decodeStatusBody(message([[1, 'not an envelope']])), undefined);
  });
});
