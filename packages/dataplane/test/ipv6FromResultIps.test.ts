import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ipv6EnabledFromResultIps } from '@istio-cni/dataplane';

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
