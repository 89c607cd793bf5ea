import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AnnotationError,
  buildSidecarIptablesRules,
  buildSidecarNftRules,
  captureConfigFromRedirect,
  DEFAULT_CAPTURE_CONFIG,
  redirectFromPod,
  renderIptablesRestore,
  renderNftTransaction,
} from '@istio-cni/capture';
import type { Pod } from '@istio-cni/capture';

const POD: Pod = {
  metadata: { annotations: { 'sidecar.istio.io/status': '{}' } },
  spec: { containers: [{ name: 'istio-proxy', env: [{ name: 'ISTIO_META_DNS_CAPTURE', value: 'true' }] }] },
};

test('the plugin config overlays the redirect on the defaults; DNS capture drives both DNS flags', () => {
  const cfg = captureConfigFromRedirect(redirectFromPod(POD));
  assert.equal(cfg.redirectDns, true);
  assert.equal(cfg.captureAllDns, true);
  assert.equal(cfg.enableIPv6, false);
  assert.equal(cfg.ownerGroupsInclude, '*');
  assert.deepEqual(cfg.ownerGroupsExclude, []);
  assert.equal(cfg.hostIPv4LoopbackCidr.text, '127.0.0.1/32');
  assert.deepEqual(cfg.inboundPortsExclude, [15020, 15021, 15090]);
  assert.equal(cfg.inboundTProxyRouteTable, 133);
});

test('environment-like options set owner groups, loopback CIDR and IPv6', () => {
  const cfg = captureConfigFromRedirect(redirectFromPod(POD), {
    ISTIO_OUTBOUND_OWNER_GROUPS: 'java,202',
    ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE: '888,ftp,',
    ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: '127.0.0.1/8',
    enableIPv6: true,
  });
  assert.deepEqual(cfg.ownerGroupsInclude, ['java', '202']);
  assert.deepEqual(cfg.ownerGroupsExclude, ['888', 'ftp']);
  assert.equal(cfg.hostIPv4LoopbackCidr.text, '127.0.0.1/8');
  assert.equal(cfg.enableIPv6, true);
});

test('bad environment values are rejected naming the variable', () => {
  const bad: Array<[string, string]> = [
    ['ISTIO_OUTBOUND_OWNER_GROUPS', 'java -j ACCEPT'],
    ['ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE', '$(id)'],
    ['ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR', '::1/128'],
    ['ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR', '127.0.0.1'],
  ];
  for (const [name, value] of bad) {
    assert.throws(
      () => captureConfigFromRedirect(redirectFromPod(POD), { [name]: value }),
      (err: unknown) => err instanceof AnnotationError && err.annotation === name && err.value === value,
    );
  }
});

test('capture-all DNS (plugin case) writes unqualified redirect and zone rules in both backends', () => {
  const cfg = captureConfigFromRedirect(redirectFromPod(POD), { enableIPv6: true });
  const v6 = renderIptablesRestore(buildSidecarIptablesRules(cfg).v6);
  assert.match(v6, /^-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS$/m);
  assert.match(v6, /^-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053$/m);
  const nft = renderNftTransaction(buildSidecarNftRules(cfg));
  assert.match(nft, /^add rule inet istio-proxy-nat istio-output-dns meta l4proto tcp tcp dport 53 counter redirect to :15053$/m);
  assert.match(nft, /^add rule inet istio-proxy-raw istio-inbound udp sport 53 counter ct zone set 1$/m);
});

test('renderers return an empty document for no rules', () => {
  assert.equal(renderIptablesRestore([]), '');
  assert.equal(renderNftTransaction([]), '');
});

test('an include-only owner group list with no groups returns all outbound (upstream InterceptOnly())', () => {
  const rules = buildSidecarIptablesRules({ ...DEFAULT_CAPTURE_CONFIG, ownerGroupsInclude: [] });
  assert.ok(rules.v4.some((r) => r.chain === 'ISTIO_OUTPUT' && r.args.join(' ') === '-j RETURN'));
});

test('rule arguments are separate argv items, never pre-joined text', () => {
  const cfg = captureConfigFromRedirect(redirectFromPod(POD), { enableIPv6: true });
  for (const rule of [...buildSidecarIptablesRules(cfg).v4, ...buildSidecarIptablesRules(cfg).v6]) {
    for (const arg of rule.args) assert.doesNotMatch(arg, /\s/, `${rule.chain}: ${JSON.stringify(arg)}`);
  }
});
