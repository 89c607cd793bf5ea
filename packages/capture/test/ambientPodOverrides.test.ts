import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AMBIENT_ANNOTATION,
  ambientConfigFromOptions,
  ambientPodOverrides,
  ambientRedirectDns,
  AnnotationError,
  buildAmbientPodIptablesRules,
  buildAmbientPodNftRules,
  DEFAULT_AMBIENT_POD_OVERRIDES,
} from '@istio-cni/capture';
import type { AmbientPodOverrides, Pod } from '@istio-cni/capture';
import { HOSTILE_ANNOTATIONS } from './hostileAnnotations.ts';

const BYPASS = AMBIENT_ANNOTATION.bypassInboundCapture;
const DNS = AMBIENT_ANNOTATION.dnsCapture;
const VIRT = AMBIENT_ANNOTATION.rerouteVirtualInterfaces;

const podWith = (annotations?: Record<string, string>): Pod => ({
  metadata: { name: 'p', namespace: 'ns', ...(annotations === undefined ? {} : { annotations }) },
});

test('annotation names are the upstream ones', () => {
  assert.equal(BYPASS, 'ambient.istio.io/bypass-inbound-capture');
  assert.equal(DNS, 'ambient.istio.io/dns-capture');
  assert.equal(VIRT, 'istio.io/reroute-virtual-interfaces');
});

test('no annotations give the defaults and no warnings', () => {
  assert.deepEqual(ambientPodOverrides(podWith()), { overrides: DEFAULT_AMBIENT_POD_OVERRIDES, warnings: [] });
  assert.deepEqual(ambientPodOverrides(podWith({ unrelated: 'x' })).overrides, DEFAULT_AMBIENT_POD_OVERRIDES);
});

test('bypass-inbound-capture sets ingress mode for every Go boolean spelling', () => {
  for (const v of ['1', 't', 'T', 'true', 'TRUE', 'True']) {
    assert.equal(ambientPodOverrides(podWith({ [BYPASS]: v })).overrides.ingressMode, true, v);
  }
  for (const v of ['0', 'f', 'F', 'false', 'FALSE', 'False']) {
    assert.equal(ambientPodOverrides(podWith({ [BYPASS]: v })).overrides.ingressMode, false, v);
  }
});

test('dns-capture overrides the node-wide setting either way; absent follows it', () => {
  const on = ambientConfigFromOptions({ redirectDns: true });
  const off = ambientConfigFromOptions({ redirectDns: false });
  const enabled = ambientPodOverrides(podWith({ [DNS]: 'true' })).overrides;
  const disabled = ambientPodOverrides(podWith({ [DNS]: 'false' })).overrides;
  const unset = ambientPodOverrides(podWith()).overrides;
  assert.equal(enabled.dnsCapture, 'enabled');
  assert.equal(disabled.dnsCapture, 'disabled');
  assert.equal(unset.dnsCapture, 'unset');
  assert.equal(ambientRedirectDns(off, enabled), true);
  assert.equal(ambientRedirectDns(on, disabled), false);
  assert.equal(ambientRedirectDns(on, unset), true);
  assert.equal(ambientRedirectDns(off, unset), false);
});

test('upstream override cases (TestGetPodLevelOverrides), interface names trimmed', () => {
  const { overrides, warnings } = ambientPodOverrides(podWith({ [DNS]: 'true', [BYPASS]: 'true', [VIRT]: 'en0ps1, en1ps1' }));
  assert.deepEqual(overrides, { ingressMode: true, dnsCapture: 'enabled', virtualInterfaces: ['en0ps1', 'en1ps1'] });
  assert.deepEqual(warnings, []);
  assert.deepEqual(ambientPodOverrides(podWith({ [VIRT]: ' eth1 ,,eth2,  ' })).overrides.virtualInterfaces, ['eth1', 'eth2']);
  assert.deepEqual(ambientPodOverrides(podWith({ [VIRT]: '' })).overrides.virtualInterfaces, []);
});

test('non-boolean values are ignored, each with a warning naming annotation and value', () => {
  const { overrides, warnings } = ambientPodOverrides(podWith({ [DNS]: 'tweedledum', [BYPASS]: 'tweedledee' }));
  assert.deepEqual(overrides, DEFAULT_AMBIENT_POD_OVERRIDES);
  assert.equal(warnings.length, 2);
  assert.ok(
    warnings.some((w) => w.includes(BYPASS) && w.includes('"tweedledee"')),
    warnings.join('\n'),
  );
  assert.ok(
    warnings.some((w) => w.includes(DNS) && w.includes('"tweedledum"')),
    warnings.join('\n'),
  );
  for (const v of ['yes', 'on', ' true', 'true ', '', 'TrUe', '2']) {
    const r = ambientPodOverrides(podWith({ [BYPASS]: v }));
    assert.equal(r.overrides.ingressMode, false, JSON.stringify(v));
    assert.equal(r.warnings.length, 1, JSON.stringify(v));
  }
});

test('warnings quote control characters and cut long values instead of echoing them raw', () => {
  const { warnings } = ambientPodOverrides(podWith({ [DNS]: `x\n${'y'.repeat(5000)}` }));
  assert.equal(warnings.length, 1);
  assert.ok(!warnings[0]?.includes('\n'));
  assert.ok((warnings[0]?.length ?? 0) < 300);
});

/**
 * The capture corpus for this annotation, plus upstream's "various manglings" value (which
 * upstream accepts and would write into the rules). Left out: `eth0\r` and the lists with empty
 * items, as upstream's ambient reading trims items and drops empty ones.
 */
const AMBIENT_VALID = new Set(['eth0\r', 'eth0,,eth1', 'eth0,', ',eth0', ' , ']);
const HOSTILE_INTERFACE_VALUES = [
  ...HOSTILE_ANNOTATIONS.filter((h) => h.annotation === VIRT && !AMBIENT_VALID.has(h.value)).map((h) => h.value),
  'asd^&&*$&*(#$&*(#&$*())),   ',
];

test('hostile virtual interface names are rejected naming the annotation; upstream "various manglings" too', () => {
  assert.ok(HOSTILE_INTERFACE_VALUES.length > 40);
  assert.deepEqual(ambientPodOverrides(podWith({ [VIRT]: 'eth0\r' })).overrides.virtualInterfaces, ['eth0']);
  for (const value of HOSTILE_INTERFACE_VALUES) {
    assert.throws(
      () => ambientPodOverrides(podWith({ [VIRT]: value })),
      (err: unknown) => err instanceof AnnotationError && err.annotation === VIRT && err.value === value,
      JSON.stringify(value),
    );
  }
});

test('hand-built overrides with a bad interface name are refused by both builders', () => {
  const config = ambientConfigFromOptions({});
  const bad: AmbientPodOverrides = { ...DEFAULT_AMBIENT_POD_OVERRIDES, virtualInterfaces: ['eth0 -j ACCEPT'] };
  assert.throws(() => buildAmbientPodIptablesRules(config, bad), /invalid interface name/);
  assert.throws(() => buildAmbientPodNftRules(config, bad), /invalid interface name/);
});
