import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type AuditRow,
  auditFailures,
  auditTable,
  type InPodRules,
  inPodRules,
  inPodRulesByFamily,
  meshIntent,
  probeSetAddresses,
} from './podAudit.ts';

const base = { annotations: {}, labels: {}, containerNames: ['app'], hostNetwork: false, namespaceLabels: {}, ambientEnabled: true };

describe('meshIntent', () => {
  it('sidecar needs the status annotation and an istio-proxy container', () => {
    const annotations = { 'sidecar.istio.io/status': '{}' };
    assert.equal(meshIntent({ ...base, annotations, containerNames: ['app', 'istio-proxy'] }), 'sidecar');
    assert.equal(meshIntent({ ...base, annotations, namespaceLabels: { 'istio.io/dataplane-mode': 'ambient' } }), 'none');
  });
  it('ambient by pod or namespace label, only with ambient enabled, a pod label none opting out', () => {
    const ns = { 'istio.io/dataplane-mode': 'ambient' };
    assert.equal(meshIntent({ ...base, namespaceLabels: ns }), 'ambient');
    assert.equal(meshIntent({ ...base, labels: { 'istio.io/dataplane-mode': 'ambient' } }), 'ambient');
    assert.equal(meshIntent({ ...base, namespaceLabels: ns, labels: { 'istio.io/dataplane-mode': 'none' } }), 'none');
    assert.equal(meshIntent({ ...base, namespaceLabels: ns, ambientEnabled: false }), 'none');
    assert.equal(meshIntent({ ...base, namespaceLabels: ns, hostNetwork: true }), 'none');
  });
});

describe('inPodRulesByFamily', () => {
  it('counts iptables for IPv4, ip6tables for IPv6, an nft table for the families it filters', () => {
    const chain = '*nat\n:ISTIO_REDIRECT - [0:0]\nCOMMIT\n';
    const none = { sidecar: false, ambient: false };
    const sidecar = { sidecar: true, ambient: false };
    assert.deepEqual(inPodRulesByFamily({ iptables: chain, ip6tables: '', nft: '' }), { v4: sidecar, v6: none });
    assert.deepEqual(inPodRulesByFamily({ iptables: '', ip6tables: chain, nft: '' }), { v4: none, v6: sidecar });
    assert.deepEqual(inPodRulesByFamily({ iptables: '', ip6tables: '', nft: 'table inet istio-ambient-nat {\n}\n' }), {
      v4: { sidecar: false, ambient: true },
      v6: { sidecar: false, ambient: true },
    });
    assert.deepEqual(inPodRulesByFamily({ iptables: '', ip6tables: '', nft: 'table ip6 istio-proxy-nat {\n}\n' }), {
      v4: none,
      v6: sidecar,
    });
    // iptables-nft's own tables in the nft listing are not ours by name.
    assert.deepEqual(inPodRulesByFamily({ iptables: '', ip6tables: '', nft: 'table ip6 nat {\n\tchain ISTIO_REDIRECT {\n}\n}\n' }), {
      v4: none,
      v6: none,
    });
  });
});

describe('inPodRules', () => {
  it('tells the sidecar chain from ambient in-pod rules in iptables-save and nft output', () => {
    assert.deepEqual(inPodRules('*nat\n:ISTIO_INBOUND - [0:0]\n:ISTIO_REDIRECT - [0:0]\nCOMMIT\n'), { sidecar: true, ambient: false });
    assert.deepEqual(inPodRules('*nat\n:ISTIO_OUTPUT - [0:0]\n:ISTIO_PRERT - [0:0]\nCOMMIT\n'), { sidecar: false, ambient: true });
    assert.deepEqual(inPodRules('table inet istio-proxy-nat {\n}\n'), { sidecar: true, ambient: false });
    assert.deepEqual(inPodRules('table inet istio-ambient-nat {\n}\n'), { sidecar: false, ambient: true });
    assert.deepEqual(inPodRules('*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n'), { sidecar: false, ambient: false });
  });
});

describe('probeSetAddresses', () => {
  it('reads ipset save lines and nft set elements of the probe sets only', () => {
    const ipset =
      'create istio-inpod-probes-v4 hash:ip family inet comment\nadd istio-inpod-probes-v4 10.242.1.5 comment "u1"\nadd other 10.9.9.9\n';
    const nft = [
      'table inet istio-ambient-nat {',
      '\tset istio-inpod-probes-v4 {',
      '\t\ttype ipv4_addr',
      '\t\tflags interval',
      '\t\telements = { 10.242.1.6 comment "u2", 10.242.1.7 comment "u3" }',
      '\t}',
      '\tset other { type ipv4_addr; elements = { 10.8.8.8 } }',
      '}',
    ].join('\n');
    assert.deepEqual([...probeSetAddresses(ipset, nft)].sort(), ['10.242.1.5', '10.242.1.6', '10.242.1.7']);
    assert.deepEqual(
      [...probeSetAddresses('', 'table inet istio-ambient-nat {\n\tset istio-inpod-probes-v4 {\n\t\ttype ipv4_addr\n\t}\n}')],
      [],
    );
  });
});

const both = (r: InPodRules) => ({ v4: r, v6: r });
const row = (over: Partial<AuditRow>): AuditRow => ({
  namespace: 'ns',
  name: 'p',
  uid: 'u',
  intent: 'none',
  ips: ['10.242.1.5'],
  rules: both({ sidecar: false, ambient: false }),
  annotated: false,
  inProbeSet: false,
  anyInProbeSet: false,
  ztunnelKnows: false,
  ...over,
});
const meshedAmbient: Partial<AuditRow> = {
  intent: 'ambient',
  rules: both({ sidecar: false, ambient: true }),
  annotated: true,
  inProbeSet: true,
  anyInProbeSet: true,
  ztunnelKnows: true,
};

describe('auditFailures', () => {
  it('passes pods whose facts match their intent', () => {
    const rows = [row({}), row({ intent: 'sidecar', rules: both({ sidecar: true, ambient: false }) }), row(meshedAmbient)];
    assert.deepEqual(auditFailures(rows), []);
    assert.match(auditTable(rows), /audit clean$/);
  });
  it('fails a pod that looks meshed (annotated) without its in-pod rules, as after a reboot', () => {
    const failures = auditFailures([row({ ...meshedAmbient, rules: both({ sidecar: false, ambient: false }) })]);
    assert.deepEqual(failures, [
      { pod: 'ns/p', problems: ['ambient pod without in-pod rules', 'redirection annotation without in-pod rules'] },
    ]);
  });
  it('fails an annotated ambient pod ztunnel does not hold, or one missing from the probe set', () => {
    assert.deepEqual(auditFailures([row({ ...meshedAmbient, ztunnelKnows: false })])[0]?.problems, ['ambient pod unknown to ztunnel']);
    assert.deepEqual(auditFailures([row({ ...meshedAmbient, inProbeSet: false })])[0]?.problems, [
      'ambient pod missing from the host probe set',
    ]);
  });
  it('fails a sidecar pod without its chain, and rules a pod should not have', () => {
    assert.deepEqual(auditFailures([row({ intent: 'sidecar' })])[0]?.problems, ['sidecar pod without its capture chain']);
    assert.deepEqual(auditFailures([row({ rules: both({ sidecar: true, ambient: true }) })])[0]?.problems, [
      'sidecar capture chain on a pod meant to be none',
      'ambient in-pod rules on a pod meant to be none',
    ]);
    assert.deepEqual(auditFailures([row({ anyInProbeSet: true, ztunnelKnows: true })])[0]?.problems, [
      'in the host probe set, meant to be none',
      'known to ztunnel, meant to be none',
    ]);
  });
  it('fails a dual-stack pod captured on one family only, naming the family it bypasses on', () => {
    const dual = ['10.242.1.5', 'fd00:10:242:1::5'];
    const v4Only = { v4: { sidecar: true, ambient: false }, v6: { sidecar: false, ambient: false } };
    assert.deepEqual(auditFailures([row({ intent: 'sidecar', ips: dual, rules: v4Only })])[0]?.problems, [
      'sidecar pod without its capture chain for IPv6',
    ]);
    // A single-family pod is judged on its own family only.
    assert.deepEqual(auditFailures([row({ intent: 'sidecar', rules: v4Only })]), []);
    assert.deepEqual(auditFailures([row({ intent: 'sidecar', ips: ['fd00:10:242:1::5'], rules: v4Only })])[0]?.problems, [
      'sidecar pod without its capture chain',
    ]);
    const ambientV6Only = { v4: { sidecar: false, ambient: false }, v6: { sidecar: false, ambient: true } };
    assert.deepEqual(auditFailures([row({ ...meshedAmbient, ips: dual, rules: ambientV6Only })])[0]?.problems, [
      'ambient pod without in-pod rules for IPv4',
      'redirection annotation without in-pod rules for IPv4',
    ]);
  });
  it('fails a pod with no ready sandbox; a node without ztunnel does not judge ztunnel', () => {
    assert.deepEqual(auditFailures([row({ rules: undefined })])[0]?.problems, ['no ready sandbox (netns not found)']);
    assert.deepEqual(auditFailures([row({ ...meshedAmbient, ztunnelKnows: undefined })]), []);
  });
});
