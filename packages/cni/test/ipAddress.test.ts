import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseCidr, parseIpAddress } from '@istio-cni/cni';

test('IPv4 and IPv6 CIDRs keep host bits and format like netip.Prefix', () => {
  assert.equal(parseCidr('127.0.0.1/8').text, '127.0.0.1/8');
  assert.equal(parseCidr('2001:DB8:0:0:0:0:0:1/64').text, '2001:db8::1/64');
  assert.equal(parseCidr('::/0').text, '::/0');
  assert.equal(parseCidr('1:0:0:1:0:0:0:1/128').text, '1:0:0:1::1/128');
  assert.equal(parseCidr('1:0:0:2:0:0:3:4/128').text, '1::2:0:0:3:4/128');
  assert.equal(parseCidr('::ffff:10.1.2.3/128').text, '::ffff:10.1.2.3/128');
  assert.equal(parseCidr('::127.0.0.53/128').text, '::7f00:35/128');
  assert.equal(parseCidr('1:2:3:4:5:6:7::/112').text, '1:2:3:4:5:6:7:0/112');
});

test('loopback detection matches netip.Addr.IsLoopback', () => {
  assert.equal(parseCidr('127.1.2.3/32').isLoopback, true);
  assert.equal(parseCidr('127.0.0.0/8').isLoopback, true);
  assert.equal(parseCidr('::1/128').isLoopback, true);
  assert.equal(parseCidr('::ffff:127.0.0.1/128').isLoopback, true);
  assert.equal(parseCidr('10.0.0.0/8').isLoopback, false);
  assert.equal(parseCidr('::2/128').isLoopback, false);
});

test('families are split like netip (4in6 is IPv6)', () => {
  assert.equal(parseCidr('10.0.0.0/8').family, 4);
  assert.equal(parseCidr('::ffff:10.0.0.0/104').family, 6);
});

test('DNS server text is kept verbatim', () => {
  assert.equal(parseIpAddress('::127.0.0.53').text, '::127.0.0.53');
  assert.equal(parseIpAddress('::127.0.0.53').family, 6);
});

test('strictly rejects malformed addresses and prefixes', () => {
  for (const bad of [
    '',
    '1.2.3',
    '1.2.3.4.5',
    '01.2.3.4',
    '256.0.0.0',
    '1.2.3.4 ',
    '::1%lo',
    '1::2::3',
    ':::',
    '1:2:3:4:5:6:7:8:9',
    '12345::',
    'g::',
    '1.2.3.4/',
    '1.2.3.4/33',
    '1.2.3.4/08',
    '::/129',
    '::/-1',
    '1.2.3.4/8/8',
    '1:2:3:4:5:6:7::8/64',
  ]) {
    assert.throws(() => parseCidr(bad.includes('/') ? bad : `${bad}/32`), Error, bad);
  }
  assert.throws(() => parseIpAddress('1.2.3.04'));
  assert.throws(() => parseIpAddress('::1:'));
  assert.throws(() => parseIpAddress(':1::'));
});
