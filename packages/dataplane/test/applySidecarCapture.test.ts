import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applySidecarCapture, createRecordingCommandRunner, DataplaneError, type OpenScratchNetns } from '@istio-cni/dataplane';
import { nftChainListings } from '../../../test/support/nftChainListings.ts';

const netns = '/var/run/netns/pod';
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });
const addresses = JSON.stringify([
  { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', scope: 'host' }] },
  {
    ifname: 'eth0',
    addr_info: [
      { family: 'inet', local: '10.1.0.5', scope: 'global' },
      { family: 'inet6', local: 'fd00::5', scope: 'global' },
    ],
  },
]);
const script = 'add table inet istio-proxy-nat\nflush table inet istio-proxy-nat\n';

function pod(...existingTables: string[]) {
  return createRecordingCommandRunner(({ argv, options }) => {
    if (argv[0] === 'ip' && argv.includes('addr') && argv.includes('show')) return { stdout: addresses, stderr: '' };
    const chains = nftChainListings(...(options.netns === netns ? existingTables : []));
    if (argv.join(' ') === 'nft -j list chains') return { stdout: chains.json, stderr: '' };
    if (argv.join(' ') === 'nft list chains') return { stdout: chains.text, stderr: '' };
    if (argv[0] === 'nft' && argv.includes('list')) return { stdout: options.netns === netns ? 'old' : 'new', stderr: '' };
    return undefined;
  });
}

test('the plan gets the detected family, then rules are applied before the routes', async () => {
  const runner = pod();
  const seen: boolean[] = [];
  const result = await applySidecarCapture(
    { runner, openScratchNetns: scratch },
    {
      netns,
      dualStack: true,
      tproxyRoutes: true,
      plan: ({ ipv6 }) => {
        seen.push(ipv6);
        return { backend: 'nft', script };
      },
    },
  );
  assert.deepEqual(seen, [true]);
  assert.deepEqual(result, { ipv6: true, outcome: 'applied' });
  const commands = runner.calls.map((c) => c.argv.join(' '));
  assert.ok(commands.indexOf('nft -f -') < commands.indexOf('ip -6 addr replace ::6/128 dev lo'));
  assert.ok(commands.includes('ip -6 route replace local default dev lo table 133'));
  assert.ok(runner.calls.every((c) => c.options.netns === netns));
});

test('without dual stack the first address (IPv4) decides', async () => {
  const result = await applySidecarCapture(
    { runner: pod(), openScratchNetns: scratch },
    { netns, plan: () => ({ backend: 'nft', script }) },
  );
  assert.equal(result.ipv6, false);
});

test('a refused apply adds no routes', async () => {
  const runner = pod('inet istio-proxy-nat');
  await assert.rejects(
    applySidecarCapture({ runner, openScratchNetns: scratch }, { netns, tproxyRoutes: true, plan: () => ({ backend: 'nft', script }) }),
    (err: unknown) => err instanceof DataplaneError && err.code === 'ERR_DATAPLANE_STATE_CONFLICT',
  );
  assert.ok(runner.calls.every((c) => !(c.argv[0] === 'ip' && (c.argv.includes('replace') || c.argv.includes('add')))));
});
