import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  configureTproxyRoutes,
  CommandError,
  createRecordingCommandRunner,
  DataplaneError,
  detectPodIpv6,
  ipv6Enabled,
  type InterfaceAddress,
} from '@istio-cni/dataplane';

const lo: InterfaceAddress[] = [
  { ifname: 'lo', family: 'inet', address: '127.0.0.1', scope: 'host' },
  { ifname: 'lo', family: 'inet6', address: '::1', scope: 'host' },
];
const v4: InterfaceAddress = { ifname: 'eth0', family: 'inet', address: '10.1.0.5', scope: 'global' };
const v6: InterfaceAddress = { ifname: 'eth0', family: 'inet6', address: 'fd00::5', scope: 'global' };
const linkLocal: InterfaceAddress = { ifname: 'eth0', family: 'inet6', address: 'fe80::1', scope: 'link' };

test('the first usable address decides the family', () => {
  assert.equal(ipv6Enabled([...lo, linkLocal, v4, v6], false), false);
  assert.equal(ipv6Enabled([...lo, linkLocal, v6, v4], false), true);
});

test('dual stack enables IPv6 when any usable IPv6 address exists', () => {
  assert.equal(ipv6Enabled([...lo, v4, v6], true), true);
  assert.equal(ipv6Enabled([...lo, v4], true), false);
});

test('a netns without a usable address is an error naming the netns', async () => {
  const ipJson = JSON.stringify([{ ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] }]);
  const runner = createRecordingCommandRunner(() => ({ stdout: ipJson, stderr: '' }));
  await assert.rejects(detectPodIpv6(runner, '/var/run/netns/p'), (err: unknown) => {
    assert.ok(err instanceof DataplaneError);
    assert.equal(err.code, 'ERR_DATAPLANE_NO_POD_ADDRESS');
    assert.match(err.message, /^failed to detect the IP family of netns "\/var\/run\/netns\/p": no non-loopback/);
    return true;
  });
  assert.deepEqual(runner.calls[0]?.argv, ['ip', '-j', 'addr', 'show']);
});

test('TPROXY routes are added per family, idempotently', async () => {
  const runner = createRecordingCommandRunner(({ argv }) =>
    argv.includes('list') && argv[1] === '-4' ? { stdout: '32765:\tfrom all fwmark 0x539 lookup 133\n', stderr: '' } : undefined,
  );
  await configureTproxyRoutes(runner, { netns: '/n', ipv6: true, tproxy: true });
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    [
      'ip -6 addr replace ::6/128 dev lo',
      'ip -4 rule list fwmark 1337 lookup 133',
      'ip -4 route replace local default dev lo table 133',
      'ip -6 rule list fwmark 1337 lookup 133',
      'ip -6 rule add fwmark 1337 lookup 133',
      'ip -6 route replace local default dev lo table 133',
    ],
  );
  assert.ok(runner.calls.every((c) => c.options.netns === '/n'));
});

test('without TPROXY only the IPv6 passthrough address is added', async () => {
  const runner = createRecordingCommandRunner();
  await configureTproxyRoutes(runner, { netns: '/n', ipv6: true, tproxy: false });
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    ['ip -6 addr replace ::6/128 dev lo'],
  );
});

test('other route failures are not swallowed', async () => {
  const runner = createRecordingCommandRunner(({ argv }) =>
    argv.includes('route')
      ? new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv, exitCode: 2, stdout: '', stderr: 'Error: Nexthop device is not up.\n' })
      : undefined,
  );
  await assert.rejects(configureTproxyRoutes(runner, { netns: '/n', ipv6: false, tproxy: true }), /Nexthop device/);
});
