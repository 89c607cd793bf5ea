import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AnnotationError, redirectFromPod } from '@istio-cni/capture';
import type { Container, Pod } from '@istio-cni/capture';

function pod(annotations: Record<string, string> = {}, proxy: Partial<Container> = {}): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', annotations: { 'sidecar.istio.io/status': '{}', ...annotations } },
    spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', ...proxy }] },
  };
}

const texts = (cidrs: unknown): unknown => (Array.isArray(cidrs) ? cidrs.map((c: { text: string }) => c.text) : cidrs);

test('defaults match upstream when no annotation is set', () => {
  assert.deepEqual(redirectFromPod(pod()), {
    targetPort: 15001,
    interceptionMode: 'REDIRECT',
    proxyUid: 1337,
    proxyGid: 1337,
    includeOutboundIPRanges: '*',
    excludeOutboundIPRanges: [],
    includeInboundPorts: '*',
    excludeInboundPorts: [15020, 15021, 15090],
    includeOutboundPorts: [],
    excludeOutboundPorts: [15020],
    excludeInterfaces: [],
    rerouteVirtualInterfaces: [],
    dnsRedirect: false,
    dualStack: false,
    invalidDrop: false,
  });
});

test('a pod without annotations at all gets the defaults', () => {
  const r = redirectFromPod({ metadata: {}, spec: { containers: [{ name: 'istio-proxy' }] } });
  assert.equal(r.interceptionMode, 'REDIRECT');
});

test('interceptionMode annotation selects TPROXY', () => {
  assert.equal(redirectFromPod(pod({ 'sidecar.istio.io/interceptionMode': 'TPROXY' })).interceptionMode, 'TPROXY');
  assert.equal(redirectFromPod(pod({ 'sidecar.istio.io/interceptionMode': 'REDIRECT' })).interceptionMode, 'REDIRECT');
});

test('outbound IP range annotations are parsed into v4 and v6 CIDRs', () => {
  const r = redirectFromPod(
    pod({
      'traffic.sidecar.istio.io/includeOutboundIPRanges': '10.0.0.0/8,2001:DB8::/32',
      'traffic.sidecar.istio.io/excludeOutboundIPRanges': '10.1.0.0/16',
    }),
  );
  assert.deepEqual(texts(r.includeOutboundIPRanges), ['10.0.0.0/8', '2001:db8::/32']);
  assert.deepEqual(texts(r.excludeOutboundIPRanges), ['10.1.0.0/16']);
  assert.deepEqual(redirectFromPod(pod({ 'traffic.sidecar.istio.io/includeOutboundIPRanges': '' })).includeOutboundIPRanges, []);
  assert.equal(redirectFromPod(pod({ 'traffic.sidecar.istio.io/includeOutboundIPRanges': '*' })).includeOutboundIPRanges, '*');
});

test('port annotations are parsed with spaces trimmed', () => {
  const r = redirectFromPod(
    pod({
      'traffic.sidecar.istio.io/includeInboundPorts': ' 80, 443 ',
      'traffic.sidecar.istio.io/includeOutboundPorts': '5000',
      'traffic.sidecar.istio.io/excludeOutboundPorts': '5555,6666',
    }),
  );
  assert.deepEqual(r.includeInboundPorts, [80, 443]);
  assert.deepEqual(r.includeOutboundPorts, [5000]);
  assert.deepEqual(r.excludeOutboundPorts, [5555, 6666], 'the annotation replaces the 15020 default');
  assert.deepEqual(redirectFromPod(pod({ 'traffic.sidecar.istio.io/includeInboundPorts': '' })).includeInboundPorts, []);
  assert.deepEqual(redirectFromPod(pod({ 'traffic.sidecar.istio.io/excludeOutboundPorts': '' })).excludeOutboundPorts, []);
  assert.deepEqual(redirectFromPod(pod({ 'traffic.sidecar.istio.io/includeInboundPorts': '0,65535' })).includeInboundPorts, [0, 65535]);
});

test('exclude inbound ports always get 15020,15021,15090 appended, de-duplicated in first-seen order', () => {
  const excl = (v: string): readonly number[] =>
    redirectFromPod(pod({ 'traffic.sidecar.istio.io/excludeInboundPorts': v })).excludeInboundPorts;
  assert.deepEqual(excl('3306'), [3306, 15020, 15021, 15090]);
  assert.deepEqual(excl(''), [15020, 15021, 15090]);
  assert.deepEqual(excl('15090,22,22'), [15090, 22, 15020, 15021]);
  assert.deepEqual(excl(' 15021 , 8080'), [15021, 8080, 15020, 15090]);
});

test('interface annotations; reroute-virtual-interfaces wins over the deprecated kubevirt one', () => {
  const r = redirectFromPod(
    pod({
      'traffic.sidecar.istio.io/excludeInterfaces': 'eth1,net1',
      'istio.io/reroute-virtual-interfaces': 'eth2',
      'traffic.sidecar.istio.io/kubevirtInterfaces': 'eth3',
    }),
  );
  assert.deepEqual(r.excludeInterfaces, ['eth1', 'net1']);
  assert.deepEqual(r.rerouteVirtualInterfaces, ['eth2']);
  // Items are trimmed, as upstream's `ValidateInterfaceNames` trims them.
  assert.deepEqual(redirectFromPod(pod({ 'traffic.sidecar.istio.io/excludeInterfaces': 'eth1, net1\r' })).excludeInterfaces, [
    'eth1',
    'net1',
  ]);
  const old = redirectFromPod(pod({ 'traffic.sidecar.istio.io/kubevirtInterfaces': 'eth3,eth4' }));
  assert.deepEqual(old.rerouteVirtualInterfaces, ['eth3', 'eth4']);
  // Present-but-empty new annotation still hides the deprecated one.
  const empty = redirectFromPod(pod({ 'istio.io/reroute-virtual-interfaces': '', 'traffic.sidecar.istio.io/kubevirtInterfaces': 'eth3' }));
  assert.deepEqual(empty.rerouteVirtualInterfaces, []);
});

test('proxy uid/gid come from istio-proxy securityContext; 0 and unset fall back to 1337', () => {
  assert.deepEqual(
    [redirectFromPod(pod({}, { securityContext: { runAsUser: 1000670000, runAsGroup: 1000670001 } }))].map((r) => [r.proxyUid, r.proxyGid]),
    [[1000670000, 1000670001]],
  );
  const zero = redirectFromPod(pod({}, { securityContext: { runAsUser: 0, runAsGroup: 0 } }));
  assert.deepEqual([zero.proxyUid, zero.proxyGid], [1337, 1337]);
  const native: Pod = {
    metadata: {},
    spec: { initContainers: [{ name: 'istio-proxy', securityContext: { runAsUser: 42 } }], containers: [{ name: 'app' }] },
  };
  assert.equal(redirectFromPod(native).proxyUid, 42, 'native sidecar (init container) is the proxy');
});

test('a non-integer runAsUser is rejected, naming the field', () => {
  for (const bad of [-1, 1.5, 2 ** 40, Number.NaN]) {
    assert.throws(
      () => redirectFromPod(pod({}, { securityContext: { runAsUser: bad } })),
      (err: unknown) =>
        err instanceof AnnotationError && err.annotation === 'istio-proxy securityContext.runAsUser' && err.value === String(bad),
    );
  }
});

test('proxy env toggles DNS capture, dual stack and invalid drop; bad booleans stay false', () => {
  const env = (name: string, value: string) => redirectFromPod(pod({}, { env: [{ name, value }] }));
  assert.equal(env('ISTIO_META_DNS_CAPTURE', 'true').dnsRedirect, true);
  assert.equal(env('ISTIO_META_DNS_CAPTURE', '1').dnsRedirect, true);
  assert.equal(env('ISTIO_META_DNS_CAPTURE', 'yes').dnsRedirect, false);
  assert.equal(env('ISTIO_DUAL_STACK', 'True').dualStack, true);
  assert.equal(env('INVALID_DROP', 'T').invalidDrop, true);
  assert.equal(env('INVALID_DROP', 'false').invalidDrop, false);
  const other: Pod = {
    metadata: {},
    spec: { containers: [{ name: 'app', env: [{ name: 'INVALID_DROP', value: 'true' }] }, { name: 'istio-proxy' }] },
  };
  assert.equal(redirectFromPod(other).invalidDrop, false, 'only the istio-proxy env counts');
});

const INVALID: ReadonlyArray<[string, string, RegExp]> = [
  ['sidecar.istio.io/interceptionMode', 'NONE', /must be REDIRECT or TPROXY/],
  ['traffic.sidecar.istio.io/includeOutboundIPRanges', '10.0.0.0/33', /prefix length out of range/],
  ['traffic.sidecar.istio.io/excludeOutboundIPRanges', '10.0.0.0/33', /prefix length out of range/],
  ['traffic.sidecar.istio.io/excludeOutboundIPRanges', '*', /invalid CIDR "\*"/],
  ['traffic.sidecar.istio.io/includeInboundPorts', '70000', /out of range/],
  ['traffic.sidecar.istio.io/excludeInboundPorts', 'http', /invalid port "http"/],
  ['traffic.sidecar.istio.io/includeOutboundPorts', '1,,2', /invalid port ""/],
  ['traffic.sidecar.istio.io/excludeOutboundPorts', '*', /not supported/],
  ['traffic.sidecar.istio.io/excludeInterfaces', 'eth0:1', /invalid interface name "eth0:1"/],
  ['traffic.sidecar.istio.io/kubevirtInterfaces', 'averyveryverylongname', /too long \(max 15 characters\)/],
  ['traffic.sidecar.istio.io/excludeInterfaces', 'eth0,,eth1', /empty interface name/],
  ['traffic.sidecar.istio.io/excludeInterfaces', '1eth', /invalid interface name "1eth": want a letter first/],
  ['istio.io/reroute-virtual-interfaces', 'eth0@if3', /invalid interface name "eth0@if3"/],
  ['istio.io/reroute-virtual-interfaces', '..', /invalid interface name/],
];

test('every validation error names the annotation and the value', () => {
  for (const [annotation, value, reason] of INVALID) {
    assert.throws(
      () => redirectFromPod(pod({ [annotation]: value })),
      (err: unknown) => {
        assert.ok(err instanceof AnnotationError);
        assert.equal(err.annotation, annotation);
        assert.equal(err.value, value);
        assert.ok(err.message.startsWith(`invalid annotation ${annotation}=${JSON.stringify(value)}: `), err.message);
        assert.match(err.message, reason);
        return true;
      },
    );
  }
});

test('the example message format', () => {
  assert.throws(() => redirectFromPod(pod({ 'traffic.sidecar.istio.io/excludeOutboundIPRanges': '10.0.0.0/33' })), {
    message: /^invalid annotation traffic\.sidecar\.istio\.io\/excludeOutboundIPRanges="10\.0\.0\.0\/33": /,
  });
});
