import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PROTOCOL, ProtocolError, isFailure, isSupportedProtocol, parseHandoffRequest, parseHandoffResponse } from '@istio-cni/handoff';

const validRequest = {
  protocol: 1,
  command: 'ADD',
  cniVersion: '1.0.0',
  containerId: 'abc',
  netns: '/var/run/netns/cni-1',
  ifName: 'eth0',
  pod: { name: 'web-0', namespace: 'default', uid: 'u-1', infraContainerId: 'abc' },
  ips: [{ address: '10.0.0.5/24', gateway: '10.0.0.1', interface: 0 }],
};

describe('parseHandoffRequest', () => {
  it('accepts a complete request and keeps every field', () => {
    assert.deepEqual(parseHandoffRequest(validRequest), validRequest);
  });

  it('ignores unknown fields sent by a newer plugin', () => {
    const r = parseHandoffRequest({ ...validRequest, futureField: { x: 1 } });
    assert.equal('futureField' in r, false);
  });

  it('treats missing ips as none', () => {
    const { ips: _ips, ...rest } = validRequest;
    assert.deepEqual(parseHandoffRequest(rest).ips, []);
  });

  it('carries GC valid attachments', () => {
    const r = parseHandoffRequest({
      ...validRequest,
      command: 'GC',
      validAttachments: [{ containerId: 'c1', ifName: 'eth0' }],
    });
    assert.deepEqual(r.validAttachments, [{ containerId: 'c1', ifName: 'eth0' }]);
  });

  const bad: [string, unknown, RegExp][] = [
    ['a non-object', [], /JSON object/],
    ['a missing protocol', { ...validRequest, protocol: undefined }, /protocol/],
    ['a fractional protocol', { ...validRequest, protocol: 1.5 }, /protocol/],
    ['an unknown command', { ...validRequest, command: 'EXEC' }, /unknown command "EXEC"/],
    ['a numeric netns', { ...validRequest, netns: 3 }, /request\.netns/],
    ['a missing pod', { ...validRequest, pod: null }, /pod must be an object/],
    ['a pod without uid', { ...validRequest, pod: { name: 'a', namespace: 'b', infraContainerId: '' } }, /pod\.uid/],
    ['ips not a list', { ...validRequest, ips: {} }, /ips must be an array/],
    ['an ip without address', { ...validRequest, ips: [{}] }, /ips\[0\]\.address/],
    ['a negative interface index', { ...validRequest, ips: [{ address: 'x', interface: -1 }] }, /interface/],
    ['attachments not a list', { ...validRequest, validAttachments: 'all' }, /validAttachments/],
  ];
  for (const [name, body, message] of bad) {
    it(`rejects ${name}`, () => {
      assert.throws(
        () => parseHandoffRequest(body),
        (err: unknown) => err instanceof ProtocolError && message.test(err.message),
      );
    });
  }
});

describe('parseHandoffResponse', () => {
  it('parses a verdict', () => {
    const r = parseHandoffResponse({ protocol: 1, verdict: 'skipped', reason: 'no sidecar' });
    assert.deepEqual(r, { protocol: 1, verdict: 'skipped', reason: 'no sidecar' });
    assert.equal(isFailure(r), false);
  });

  it('parses a CNI error', () => {
    const r = parseHandoffResponse({ protocol: 1, error: { code: 11, msg: 'no ztunnel', details: 'd' } });
    assert.equal(isFailure(r), true);
    assert.deepEqual(r, { protocol: 1, error: { code: 11, msg: 'no ztunnel', details: 'd' } });
  });

  it('rejects an unknown verdict', () => {
    assert.throws(() => parseHandoffResponse({ protocol: 1, verdict: 'maybe' }), /unknown verdict "maybe"/);
  });

  it('rejects an error without an integer code', () => {
    assert.throws(() => parseHandoffResponse({ protocol: 1, error: { code: '11', msg: 'x' } }), /error\.code/);
  });
});

describe('protocol skew', () => {
  it('supports the current version and refuses versions it does not know', () => {
    assert.equal(isSupportedProtocol(PROTOCOL), true);
    assert.equal(isSupportedProtocol(PROTOCOL + 1), false);
    assert.equal(isSupportedProtocol(0), false);
  });
});
