// The host-state check's diff (hostLeaks.ts): pure, no host access.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type HostSnapshot, hostLeaks, normalizeRuleDump, persistentLeaks } from './hostLeaks.ts';

function snapshot(overrides: Partial<HostSnapshot> = {}): HostSnapshot {
  return {
    netns: [],
    links: ['lo', 'eth0'],
    rules: { 'iptables-legacy': [], nft: [] },
    tables: [],
    ipsets: [],
    mounts: ['/', '/proc'],
    cgroups: ['/sys/fs/cgroup/memory/user'],
    sysctls: ['net/ipv4/ip_forward=0', 'vm/overcommit_memory=0'],
    hostPaths: ['/run/lock'],
    cniState: [],
    processes: [],
    ...overrides,
  };
}

test('an unchanged host has no leaks', () => {
  assert.deepEqual(hostLeaks(snapshot(), snapshot()), []);
});

test('each kind of leftover is named with its kind', () => {
  const before = snapshot();
  const after = snapshot({
    netns: ['amb-cni'],
    links: ['lo', 'eth0', 'veth1234'],
    tables: ['iptables-legacy nat', 'nft table ip nat'],
    cgroups: ['/sys/fs/cgroup/memory/user', '/sys/fs/cgroup/memory/istio-cni-image-42'],
    hostPaths: ['/run/lock', '/run/istio-cni'],
    processes: ['314 containerd'],
  });
  assert.deepEqual(hostLeaks(before, after), [
    'netns: amb-cni',
    'links: veth1234',
    'tables: iptables-legacy nat',
    'tables: nft table ip nat',
    'cgroups: /sys/fs/cgroup/memory/istio-cni-image-42',
    'hostPaths: /run/istio-cni',
    'processes: 314 containerd',
  ]);
});

test('a changed sysctl is named with its value before', () => {
  const after = snapshot({ sysctls: ['net/ipv4/ip_forward=1', 'vm/overcommit_memory=0'] });
  assert.deepEqual(hostLeaks(snapshot(), after), ['sysctls: net/ipv4/ip_forward=1 (was 0)']);
});

test('what was there before and is gone after is no leak; a duplicate mount is', () => {
  const before = snapshot({ netns: ['theirs'], mounts: ['/', '/proc', '/run/netns'] });
  assert.deepEqual(hostLeaks(before, snapshot()), []);
  const after = snapshot({ mounts: ['/', '/proc', '/run/netns', '/run/netns'] });
  assert.deepEqual(hostLeaks(before, after), ['mounts: /run/netns']);
});

test('a rule dump line is new by its table and chain; counters do not count', () => {
  const nftBefore = 'table ip filter {\n\tchain c {\n\t\tcounter packets 1 bytes 60 accept\n\t}\n}\n';
  const nftAfter = 'table ip filter {\n\tchain c {\n\t\tcounter packets 9 bytes 900 accept\n\t\tip daddr 10.0.0.1 drop\n\t}\n}\n';
  const before = snapshot({ rules: { nft: normalizeRuleDump('nft', nftBefore) } });
  const after = snapshot({ rules: { nft: normalizeRuleDump('nft', nftAfter) } });
  assert.deepEqual(hostLeaks(before, after), ['nft: table ip filter chain c ip daddr 10.0.0.1 drop']);
});

test('a table holding only accept-policy base chains adds no rule lines (the tables list names it)', () => {
  const emptyNat = 'table ip nat {\n\tchain PREROUTING {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t}\n}\n';
  assert.deepEqual(normalizeRuleDump('nft', emptyNat), []);
  const save =
    '# Generated\n*nat\n:PREROUTING ACCEPT [3:180]\n:POSTROUTING ACCEPT [0:0]\n:ISTIO_POSTRT - [0:0]\n-A POSTROUTING -j ISTIO_POSTRT\nCOMMIT\n';
  assert.deepEqual(normalizeRuleDump('iptables-save', save), ['nat :ISTIO_POSTRT - []', 'nat -A POSTROUTING -j ISTIO_POSTRT']);
  assert.deepEqual(normalizeRuleDump('iptables-save', '*nat\n:POSTROUTING DROP [0:0]\nCOMMIT\n'), ['nat :POSTROUTING DROP []']);
});

test('only leaks a second look still finds are kept', () => {
  assert.deepEqual(
    persistentLeaks(['netns: theirs', 'links: veth1', 'tables: iptables-legacy nat'], ['tables: iptables-legacy nat', 'links: veth2']),
    ['tables: iptables-legacy nat'],
  );
});
