import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ipv6EnabledFromResultIps, uncapturedIpv6 } from '@istio-cni/dataplane';

describe('ipv6EnabledFromResultIps (IP family from the CNI result)', () => {
  const cases: [string, string[], boolean, boolean | undefined][] = [
    ['IPv4 only', ['10.0.0.5/24'], false, false],
    ['IPv6 first', ['fd00::5/64', '10.0.0.5/24'], false, true],
    ['IPv4 first without dual stack', ['10.0.0.5/24', 'fd00::5/64'], false, false],
    ['IPv4 first with dual stack', ['10.0.0.5/24', 'fd00::5/64'], true, true],
    ['link-local IPv6 is not a pod address', ['fe80::1/64', '10.0.0.5/24'], false, false],
    ['no addresses: inspect the netns instead', [], false, undefined],
    ['only loopback: inspect the netns instead', ['127.0.0.1/8'], false, undefined],
  ];
  for (const [name, ips, dual, want] of cases) {
    it(name, () => assert.equal(ipv6EnabledFromResultIps(ips, dual), want));
  }
});

describe('uncapturedIpv6 (a dual-stack pod captured on IPv4 only)', () => {
  const cases: [string, string[], boolean, string[]][] = [
    ['IPv4 first without dual stack: its IPv6 address bypasses', ['10.0.0.5/24', 'fd00::5/64'], false, ['fd00::5']],
    ['bare addresses, as the hand-off carries them', ['10.0.0.5', 'fd00::5', 'fd00::6'], false, ['fd00::5', 'fd00::6']],
    ['IPv4 first with dual stack: both captured', ['10.0.0.5/24', 'fd00::5/64'], true, []],
    ['IPv6 first: IPv6 rules are written', ['fd00::5/64', '10.0.0.5/24'], false, []],
    ['IPv4 only', ['10.0.0.5/24'], false, []],
    ['link-local IPv6 carries no pod traffic', ['10.0.0.5/24', 'fe80::1/64'], false, []],
    ['no addresses', [], false, []],
  ];
  for (const [name, ips, dual, want] of cases) {
    it(name, () => assert.deepEqual(uncapturedIpv6(ips, dual), want));
  }
});
