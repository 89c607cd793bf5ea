import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniError, emptyResult, encodeResult, ErrorCode, parseResult, resultFamily, SUPPORTED_VERSIONS } from '@istio-cni/cni';

type Json = Record<string, unknown>;

const DNS = { nameservers: ['10.96.0.10'], domain: 'cluster.local', search: ['svc.cluster.local'], options: ['ndots:5'] };
const DEFAULT_ROUTE_V4 = { dst: '0.0.0.0/0', gw: '10.1.0.1', mtu: 1400, advmss: 1360, priority: 10, table: 100, scope: 0 };
const ROUTES_100 = [DEFAULT_ROUTE_V4, { dst: '::/0', gw: 'fd00::1' }, { dst: '192.168.0.0/16' }];

/** A rich result as each schema writes it. */
function sample(version: string): Json {
  const family = resultFamily(version);
  if (family === '100') {
    return {
      cniVersion: version,
      interfaces: [
        {
          name: 'eth0',
          mac: '0a:58:0a:01:00:05',
          mtu: 1450,
          sandbox: '/var/run/netns/pod',
          socketPath: '/run/vhost.sock',
          pciID: '0000:00:01.0',
        },
        { name: 'veth1' },
      ],
      ips: [
        { interface: 0, address: '10.1.0.5/24', gateway: '10.1.0.1' },
        { interface: 0, address: '10.2.0.5/16' },
        { interface: 0, address: 'fd00::5/64', gateway: 'fd00::1' },
        { address: 'fd01::5/64' },
      ],
      routes: ROUTES_100,
      dns: DNS,
    };
  }
  if (family === '040') {
    return {
      cniVersion: version,
      interfaces: [{ name: 'eth0', mac: '0a:58:0a:01:00:05', sandbox: '/var/run/netns/pod' }, { name: 'veth1' }],
      ips: [
        { version: '4', interface: 0, address: '10.1.0.5/24', gateway: '10.1.0.1' },
        { version: '4', interface: 0, address: '10.2.0.5/16' },
        { version: '6', interface: 0, address: 'fd00::5/64', gateway: 'fd00::1' },
        { version: '6', address: 'fd01::5/64' },
      ],
      routes: ROUTES_100,
      dns: DNS,
    };
  }
  return {
    cniVersion: version,
    ip4: { ip: '10.1.0.5/24', gateway: '10.1.0.1', routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '192.168.0.0/16' }] },
    ip6: { ip: 'fd00::5/64', gateway: 'fd00::1', routes: [{ dst: '::/0', gw: 'fd00::1' }] },
    dns: DNS,
  };
}

/** What the reference converters produce from sample(from) for version `to`. */
function expected(from: string, to: string): Json {
  const f = resultFamily(from);
  const t = resultFamily(to);
  if (f === t) return { ...sample(from), cniVersion: to };
  if (t === '020') {
    // First IPv4 and first IPv6 only; routes reduced to dst/gw and filed by family.
    return {
      cniVersion: to,
      ip4: { ip: '10.1.0.5/24', gateway: '10.1.0.1', routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '192.168.0.0/16' }] },
      ip6: { ip: 'fd00::5/64', gateway: 'fd00::1', routes: [{ dst: '::/0', gw: 'fd00::1' }] },
      dns: DNS,
    };
  }
  if (f === '020') {
    const ips = [
      { address: '10.1.0.5/24', gateway: '10.1.0.1' },
      { address: 'fd00::5/64', gateway: 'fd00::1' },
    ];
    return {
      cniVersion: to,
      ips: t === '040' ? ips.map((ip) => ({ version: ip.address.includes(':') ? '6' : '4', ...ip })) : ips,
      routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }, { dst: '192.168.0.0/16' }, { dst: '::/0', gw: 'fd00::1' }],
      dns: DNS,
    };
  }
  if (t === '040') return { ...sample('0.4.0'), cniVersion: to }; // 1.x → 0.3/0.4: interface mtu/socketPath/pciID dropped
  // 0.3/0.4 → 1.x: `version` dropped, interfaces keep what 0.4.0 had.
  const s = sample(from);
  return { ...s, cniVersion: to, ips: (s['ips'] as Json[]).map(({ version: _v, ...ip }) => ip) };
}

function title(from: string, to: string): string {
  const f = resultFamily(from);
  const t = resultFamily(to);
  if (f === t) return 'keeps every field';
  if (t === '020') return 'keeps the first IPv4 and IPv6';
  if (f === '020') return 'lifts ip4/ip6 into ips and routes';
  if (t === '040') return 'labels IP versions and drops 1.1 interface fields';
  return 'drops IP version labels';
}

describe('result conversion between every pair of versions', () => {
  for (const from of SUPPORTED_VERSIONS) {
    for (const to of SUPPORTED_VERSIONS) {
      it(`[${from} → ${to}] ${title(from, to)}`, () => {
        const result = parseResult(sample(from));
        assert.equal(result.cniVersion, from);
        const encoded = encodeResult(result, to);
        assert.deepEqual(encoded, expected(from, to));
        // Key order is what Go marshals: cniVersion first, dns last.
        const keys = Object.keys(encoded);
        assert.equal(keys[0], 'cniVersion');
        assert.equal(keys.at(-1), 'dns');
        // The output reads back and re-encodes identically.
        assert.deepEqual(encodeResult(parseResult(encoded), to), encoded);
      });
    }
  }
});

describe('result conversion edge cases', () => {
  for (const from of SUPPORTED_VERSIONS.filter((v) => resultFamily(v) !== '020')) {
    for (const to of ['0.1.0', '0.2.0']) {
      it(`[${from} → ${to}] fails without any IP address`, () => {
        const result = parseResult({ cniVersion: from, interfaces: [{ name: 'eth0' }] });
        assert.throws(
          () => encodeResult(result, to),
          (e: unknown) => e instanceof CniError && e.code === ErrorCode.Internal && e.message === 'cannot convert: no valid IP addresses',
        );
      });
    }
  }

  it('[0.2.0 → 0.1.0] keeps route extras within the legacy schema', () => {
    const r = parseResult({ cniVersion: '0.2.0', ip4: { ip: '10.0.0.2/24', routes: [{ dst: '0.0.0.0/0', mtu: 1400 }] } });
    assert.deepEqual(encodeResult(r, '0.1.0'), {
      cniVersion: '0.1.0',
      ip4: { ip: '10.0.0.2/24', routes: [{ dst: '0.0.0.0/0', mtu: 1400 }] },
      dns: {},
    });
  });

  it('[0.1.0] an empty legacy result stays empty', () => {
    assert.deepEqual(encodeResult(parseResult({ cniVersion: '0.1.0' }), '0.2.0'), { cniVersion: '0.2.0', dns: {} });
  });

  it('[1.1.0 → 0.2.0] drops a route whose family has no address', () => {
    const r = parseResult({ cniVersion: '1.1.0', ips: [{ address: '10.0.0.2/24' }], routes: [{ dst: '::/0' }, { dst: '0.0.0.0/0' }] });
    assert.deepEqual(encodeResult(r, '0.2.0'), {
      cniVersion: '0.2.0',
      ip4: { ip: '10.0.0.2/24', routes: [{ dst: '0.0.0.0/0' }] },
      dns: {},
    });
  });

  it('[1.0.0 → 0.4.0] interface index 0 is kept, not treated as empty', () => {
    const r = parseResult({ cniVersion: '1.0.0', ips: [{ interface: 0, address: '10.0.0.2/24' }] });
    assert.deepEqual(encodeResult(r, '0.4.0'), {
      cniVersion: '0.4.0',
      ips: [{ version: '4', interface: 0, address: '10.0.0.2/24' }],
      dns: {},
    });
  });

  it('[1.1.0 → 1.0.0] keeps 1.1 interface and route fields (the reference library shares one type)', () => {
    const s = sample('1.1.0');
    assert.deepEqual(encodeResult(parseResult(s), '1.0.0'), { ...s, cniVersion: '1.0.0' });
  });

  it('normalises addresses the way Go prints them', () => {
    const r = parseResult({
      cniVersion: '1.0.0',
      ips: [
        { address: '2001:DB8:0:0:0:0:0:1/64', gateway: '2001:db8:0:0:1:0:0:1' },
        { address: '::ffff:10.0.0.9/120' },
        { address: '10.0.0.7/8' },
      ],
      routes: [{ dst: 'fe80:0:0:0:0:0:0:0/10', gw: '0:0:0:0:0:0:0:1' }],
    });
    assert.deepEqual(r.ips, [
      { address: '2001:db8::1/64', gateway: '2001:db8::1:0:0:1' },
      { address: '10.0.0.9/24' },
      { address: '10.0.0.7/8' },
    ]);
    assert.deepEqual(r.routes, [{ dst: 'fe80::/10', gw: '::1' }]);
    assert.equal((encodeResult(r, '0.4.0')['ips'] as Json[])[1]?.['version'], '4');
  });

  it('leaves out empty lists and zero values, keeps dns as {}', () => {
    const r = parseResult({
      cniVersion: '1.0.0',
      interfaces: [],
      ips: [],
      routes: [{ dst: '0.0.0.0/0', mtu: 0, gw: '' }],
      dns: { nameservers: [], domain: '' },
    });
    assert.deepEqual(encodeResult(r, '1.0.0'), { cniVersion: '1.0.0', routes: [{ dst: '0.0.0.0/0' }], dns: {} });
  });

  it('refuses an unknown target version with the reference text', () => {
    const r = parseResult(sample('1.1.0'));
    assert.throws(() => encodeResult(r, '9.9.9'), { message: 'no converter for CNI result version 1.1.0 to 9.9.9' });
    assert.throws(() => encodeResult(r, ''), { message: 'no converter for CNI result version 1.1.0 to ' });
  });

  it('reads an empty legacy cniVersion as 0.2.0', () => {
    assert.equal(parseResult({ ip4: { ip: '10.0.0.2/24' } }).cniVersion, '0.2.0');
  });
});

describe('parseResult schema selection and validation', () => {
  it('uses the requested version schema and checks the result belongs to it', () => {
    assert.throws(() => parseResult({ cniVersion: '0.4.0' }, '1.0.0'), {
      message: 'result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is "0.4.0"',
    });
    assert.throws(() => parseResult({ cniVersion: '1.0.0' }, '0.2.0'), {
      message: 'result type supports [ 0.1.0 0.2.0] but unmarshalled CNIVersion is "1.0.0"',
    });
    assert.throws(() => parseResult({ cniVersion: '0.4.0' }, '0.5.0'), { message: 'unsupported CNI result version "0.5.0"' });
    assert.equal(parseResult({ cniVersion: '0.3.0' }, '0.4.0').cniVersion, '0.3.0');
  });

  const BAD: [string, unknown, string][] = [
    ['a non-object', [], 'result: expected an object, got array'],
    ['cniVersion as number', { cniVersion: 1 }, 'cniVersion: expected a string, got number'],
    [
      'a bad ips[1].address',
      { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1/24' }, { address: '10.0.0.1/33' }] },
      'ips[1].address: invalid CIDR address: 10.0.0.1/33',
    ],
    [
      'a zone in an address',
      { cniVersion: '1.0.0', ips: [{ address: 'fe80::1%eth0/64' }] },
      'ips[0].address: invalid CIDR address: fe80::1%eth0/64',
    ],
    [
      'a leading-zero octet',
      { cniVersion: '1.0.0', ips: [{ address: '010.0.0.1/24' }] },
      'ips[0].address: invalid CIDR address: 010.0.0.1/24',
    ],
    [
      'a bad gateway',
      { cniVersion: '1.0.0', ips: [{ address: '10.0.0.1/24', gateway: '10.0.0' }] },
      'ips[0].gateway: invalid IP address: 10.0.0',
    ],
    [
      'a mislabelled 0.4.0 version',
      { cniVersion: '0.4.0', ips: [{ version: '6', address: '10.0.0.1/24' }] },
      'ips[0].version: "6" does not match address 10.0.0.1/24',
    ],
    [
      'a route table as string',
      { cniVersion: '1.1.0', routes: [{ dst: '0.0.0.0/0', table: 'main' }] },
      'routes[0].table: expected an integer, got string "main"',
    ],
    [
      'an ip6 route in ip4',
      { cniVersion: '0.2.0', ip4: { ip: '10.0.0.2/24', routes: [{ dst: '::/0' }] } },
      'ip4.routes[0].dst: ::/0 is not an IPv4 route',
    ],
    ['dns.domain as list', { cniVersion: '1.0.0', dns: { domain: [] } }, 'dns.domain: expected a string, got array'],
  ];
  for (const [name, json, msg] of BAD) {
    it(`rejects ${name} naming the field (code 6)`, () => {
      assert.throws(
        () => parseResult(json),
        (e: unknown) => e instanceof CniError && e.code === ErrorCode.DecodingFailure && e.message === msg,
      );
    });
  }
});

describe('emptyResult', () => {
  for (const v of SUPPORTED_VERSIONS) {
    it(`[${v}] is just the version and an empty dns`, () => {
      assert.deepEqual(emptyResult(v), { cniVersion: v, dns: {} });
    });
  }
});
