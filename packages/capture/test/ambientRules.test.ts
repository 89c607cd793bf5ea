import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AMBIENT,
  AmbientConfigError,
  ambientConfigFromOptions,
  ambientHostIptablesDeletePlan,
  ambientHostNftRulesDeleteScript,
  ambientPodIptablesDeletePlan,
  ambientPodNftDeleteScript,
  ambientPodRoutes,
  ambientProbeSetElementScript,
  ambientProbeSetName,
  ambientProbeSetsCreateScript,
  ambientProbeSetsDestroyScript,
  ambientProbeSetsFlushScript,
  buildAmbientHostIptablesRules,
  buildAmbientHostNftRules,
  buildAmbientPodIptablesRules,
  buildAmbientPodNftRules,
  DEFAULT_AMBIENT_POD_OVERRIDES,
  ipRouteArgs,
  ipRuleArgs,
  renderAmbientHostNftTransaction,
  renderAmbientPodNftTransaction,
  renderIptablesRestore,
} from '@istio-cni/capture';

test('defaults: upstream in-pod constants and probe SNAT addresses', () => {
  const cfg = ambientConfigFromOptions();
  assert.equal(cfg.hostProbeSnatAddress.address, '169.254.7.127');
  assert.equal(cfg.hostProbeV6SnatAddress.address, 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff');
  assert.equal(cfg.enableIPv6, false);
  assert.equal(cfg.redirectDns, false);
  assert.equal(cfg.reconcile, false);
  assert.equal(AMBIENT.inpodMark, 1337);
  assert.equal(AMBIENT.routeTableInbound, 100);
  assert.deepEqual(
    [AMBIENT.ztunnelOutboundPort, AMBIENT.ztunnelInboundPlaintextPort, AMBIENT.ztunnelInboundPort, AMBIENT.dnsCapturePort],
    [15001, 15006, 15008, 15053],
  );
  assert.equal(ambientProbeSetName(4), 'istio-inpod-probes-v4');
  assert.equal(ambientProbeSetName(6), 'istio-inpod-probes-v6');
});

test('HOST_PROBE_SNAT_IP(V6) overrides are canonicalised and reach every rule flavour', () => {
  const cfg = ambientConfigFromOptions({ enableIPv6: true, hostProbeSnatIp: '169.254.9.9', hostProbeSnatIpv6: 'FD00:0::7' });
  assert.equal(cfg.hostProbeV6SnatAddress.address, 'fd00::7');
  const pod = buildAmbientPodIptablesRules(cfg, DEFAULT_AMBIENT_POD_OVERRIDES);
  assert.match(renderIptablesRestore(pod.v4), /^-A ISTIO_PRERT -s 169\.254\.9\.9 -p tcp -m tcp -j ACCEPT$/m);
  assert.match(renderIptablesRestore(pod.v6), /^-A ISTIO_OUTPUT -d fd00::7 -p tcp -m tcp -j ACCEPT$/m);
  assert.match(renderIptablesRestore(buildAmbientHostIptablesRules(cfg).v6), /--to-source fd00::7$/m);
  assert.match(
    renderAmbientPodNftTransaction(buildAmbientPodNftRules(cfg, DEFAULT_AMBIENT_POD_OVERRIDES)),
    /ip6 saddr fd00::7 counter accept$/m,
  );
  assert.match(renderAmbientHostNftTransaction(buildAmbientHostNftRules(cfg, 0)), /snat to 169\.254\.9\.9$/m);
});

test('bad SNAT addresses are rejected naming the setting and value', () => {
  const bad: Array<['hostProbeSnatIp' | 'hostProbeSnatIpv6', string, string]> = [
    ['hostProbeSnatIp', '169.254.7.300', 'HOST_PROBE_SNAT_IP'],
    ['hostProbeSnatIp', 'fd00::1', 'HOST_PROBE_SNAT_IP'],
    ['hostProbeSnatIp', '', 'HOST_PROBE_SNAT_IP'],
    ['hostProbeSnatIp', '1.2.3.4 -j ACCEPT', 'HOST_PROBE_SNAT_IP'],
    ['hostProbeSnatIpv6', '169.254.7.127', 'HOST_PROBE_SNAT_IPV6'],
    ['hostProbeSnatIpv6', 'fe80::1%eth0', 'HOST_PROBE_SNAT_IPV6'],
  ];
  for (const [option, value, setting] of bad) {
    assert.throws(
      () => ambientConfigFromOptions({ [option]: value }),
      (err: unknown) =>
        err instanceof AmbientConfigError && err.setting === setting && err.value === value && err.message.includes(setting),
      `${option}=${value}`,
    );
  }
});

test('IPv6 off: no v6 rules, routes, deletes or set', () => {
  const cfg = ambientConfigFromOptions({ redirectDns: true });
  assert.deepEqual(buildAmbientPodIptablesRules(cfg, DEFAULT_AMBIENT_POD_OVERRIDES).v6, []);
  assert.deepEqual(buildAmbientHostIptablesRules(cfg).v6, []);
  assert.deepEqual(ambientPodIptablesDeletePlan(cfg).v6, []);
  assert.deepEqual(ambientHostIptablesDeletePlan(cfg).v6, []);
  assert.ok(!renderAmbientPodNftTransaction(buildAmbientPodNftRules(cfg, DEFAULT_AMBIENT_POD_OVERRIDES)).includes('ip6'));
  assert.ok(!ambientProbeSetsCreateScript(cfg).includes('-v6'));
  assert.equal(ambientProbeSetElementScript(cfg, 'add', 'fd00::1', 'uid'), undefined);
});

test('in-pod delete plan (as upstream): six jumps, then flush, then delete, per family', () => {
  const plan = ambientPodIptablesDeletePlan(ambientConfigFromOptions({ enableIPv6: true }));
  assert.equal(plan.v4.length, 18);
  assert.deepEqual(plan.v6, plan.v4);
  assert.deepEqual(
    plan.v4.slice(0, 6).map((a) => a.join(' ')),
    [
      '-t mangle -D PREROUTING -j ISTIO_PRERT',
      '-t mangle -D OUTPUT -j ISTIO_OUTPUT',
      '-t nat -D OUTPUT -j ISTIO_OUTPUT',
      '-t raw -D PREROUTING -j ISTIO_PRERT',
      '-t raw -D OUTPUT -j ISTIO_OUTPUT',
      '-t nat -D PREROUTING -j ISTIO_PRERT',
    ],
  );
  assert.ok(plan.v4.slice(6, 12).every((a) => a[2] === '-F'));
  assert.ok(plan.v4.slice(12).every((a) => a[2] === '-X'));
  // Callers may mutate their copy without affecting the next plan.
  (plan.v4[0] as string[]).push('x');
  assert.equal(ambientPodIptablesDeletePlan(ambientConfigFromOptions()).v4[0]?.length, 6);
});

test('host delete plan removes the jump, then flushes and deletes ISTIO_POSTRT', () => {
  const plan = ambientHostIptablesDeletePlan(ambientConfigFromOptions({ enableIPv6: true }));
  const expected = [
    ['-t', 'nat', '-D', 'POSTROUTING', '-j', 'ISTIO_POSTRT'],
    ['-t', 'nat', '-F', 'ISTIO_POSTRT'],
    ['-t', 'nat', '-X', 'ISTIO_POSTRT'],
  ];
  assert.deepEqual(plan, { v4: expected, v6: expected });
});

test('mark ip rule and loopback routes per family; v6 route skipped when lo has IPv6 disabled', () => {
  const v4only = ambientPodRoutes(ambientConfigFromOptions());
  assert.deepEqual(
    v4only.ipRules.map((r) => ipRuleArgs(r, 'add').join(' ')),
    ['ip -4 rule add fwmark 0x111/0xfff pref 32764 lookup 100'],
  );
  assert.deepEqual(
    v4only.routes.map((r) => ipRouteArgs(r, 'replace').join(' ')),
    ['ip -4 route replace local 0.0.0.0/0 dev lo table 100'],
  );
  const dual = ambientPodRoutes(ambientConfigFromOptions({ enableIPv6: true }));
  assert.deepEqual(
    dual.ipRules.map((r) => ipRuleArgs(r, 'del').join(' ')),
    ['ip -4 rule del fwmark 0x111/0xfff pref 32764 lookup 100', 'ip -6 rule del fwmark 0x111/0xfff pref 32764 lookup 100'],
  );
  assert.deepEqual(
    dual.routes.map((r) => ipRouteArgs(r, 'del').join(' ')),
    ['ip -4 route del local 0.0.0.0/0 dev lo table 100', 'ip -6 route del local ::/0 dev lo table 100'],
  );
  const loV6Off = ambientPodRoutes(ambientConfigFromOptions({ enableIPv6: true }), { loopbackIpv6Disabled: true });
  assert.equal(loV6Off.ipRules.length, 2);
  assert.deepEqual(
    loV6Off.routes.map((r) => r.family),
    [4],
  );
});

test('nft delete and set scripts', () => {
  const dual = ambientConfigFromOptions({ enableIPv6: true });
  assert.equal(
    ambientPodNftDeleteScript(),
    [
      'add table inet istio-ambient-nat',
      'delete table inet istio-ambient-nat',
      'add table inet istio-ambient-mangle',
      'delete table inet istio-ambient-mangle',
      'add table inet istio-ambient-raw',
      'delete table inet istio-ambient-raw',
      '',
    ].join('\n'),
  );
  assert.equal(ambientHostNftRulesDeleteScript(), 'add table inet istio-ambient-nat\nflush table inet istio-ambient-nat\n');
  assert.equal(
    ambientProbeSetsCreateScript(dual),
    [
      'add table inet istio-ambient-nat',
      'add set inet istio-ambient-nat istio-inpod-probes-v4 { type ipv4_addr ; comment "UUID of the pods that are part of ambient mesh" ; }',
      'add set inet istio-ambient-nat istio-inpod-probes-v6 { type ipv6_addr ; comment "UUID of the pods that are part of ambient mesh" ; }',
      '',
    ].join('\n'),
  );
  assert.equal(
    ambientProbeSetsFlushScript(dual),
    'flush set inet istio-ambient-nat istio-inpod-probes-v4\nflush set inet istio-ambient-nat istio-inpod-probes-v6\n',
  );
  assert.equal(ambientProbeSetsDestroyScript(), 'add table inet istio-ambient-nat\ndelete table inet istio-ambient-nat\n');
});

test('probe set elements: UID comment, v4-mapped addresses unmapped, deletes need no UID', () => {
  const dual = ambientConfigFromOptions({ enableIPv6: true });
  const uid = '863b91d4-4b68-4efa-917f-4b560e3e86aa';
  assert.equal(
    ambientProbeSetElementScript(dual, 'add', '10.244.0.5', uid),
    `add element inet istio-ambient-nat istio-inpod-probes-v4 { 10.244.0.5 comment "${uid}" }\n`,
  );
  assert.equal(
    ambientProbeSetElementScript(dual, 'add', '::ffff:10.244.0.6', uid),
    `add element inet istio-ambient-nat istio-inpod-probes-v4 { 10.244.0.6 comment "${uid}" }\n`,
  );
  assert.equal(
    ambientProbeSetElementScript(dual, 'add', 'FD00:0:0::5', uid),
    `add element inet istio-ambient-nat istio-inpod-probes-v6 { fd00::5 comment "${uid}" }\n`,
  );
  assert.equal(
    ambientProbeSetElementScript(dual, 'delete', '10.244.0.5'),
    'delete element inet istio-ambient-nat istio-inpod-probes-v4 { 10.244.0.5 }\n',
  );
});

test('probe set elements refuse hostile IPs and UIDs', () => {
  const cfg = ambientConfigFromOptions();
  for (const ip of ['10.0.0.1 }', '10.0.0.1; flush ruleset', '', '10.0.0.01', 'fe80::1%eth0', '10.0.0.0/8']) {
    assert.throws(() => ambientProbeSetElementScript(cfg, 'add', ip, 'uid'), /invalid IP address/, ip);
  }
  for (const uid of ['', 'a" }; flush ruleset; #', 'a\nb', 'a b', '-x', 'a'.repeat(129), 'ü']) {
    assert.throws(() => ambientProbeSetElementScript(cfg, 'add', '10.0.0.1', uid), /invalid pod UID/, JSON.stringify(uid));
  }
  assert.throws(() => ambientProbeSetElementScript(cfg, 'add', '10.0.0.1'), /needs the pod UID/);
});

test('the kubelet UID must be a plain non-negative integer', () => {
  const cfg = ambientConfigFromOptions();
  assert.match(renderAmbientHostNftTransaction(buildAmbientHostNftRules(cfg, '0')), /skuid 0 /);
  for (const uid of [-1, 1.5, '1000 counter accept', '', '01', 'root', 2 ** 32]) {
    assert.throws(() => buildAmbientHostNftRules(cfg, uid), /invalid id|out of range/, String(uid));
  }
});

test('rule arguments are separate argv items, never pre-joined text', () => {
  const cfg = ambientConfigFromOptions({ enableIPv6: true, redirectDns: true });
  const overrides = { ...DEFAULT_AMBIENT_POD_OVERRIDES, virtualInterfaces: ['eth1'] };
  const rules = [
    ...Object.values(buildAmbientPodIptablesRules(cfg, overrides)).flat(),
    ...Object.values(buildAmbientHostIptablesRules(cfg)).flat(),
  ];
  for (const rule of rules) for (const arg of rule.args) assert.ok(arg !== '' && !/\s/.test(arg), JSON.stringify(arg));
});
