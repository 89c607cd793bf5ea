import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CommandError,
  createRecordingCommandRunner,
  holdsNftHostTable,
  type IptablesBackend,
  iptablesBinaries,
  type RecordedCall,
  sidecarRulesHeldIn,
} from '@istio-cni/dataplane';

const version = { major: 1, minor: 8, patch: 9 };
const iptablesNft: IptablesBackend = { flavor: 'nft', nfTables: true, version, binaries: iptablesBinaries('nft') };
const netns = '/var/run/netns/pod';
const capture = '*nat\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT - [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n';
const chainsOf = (table: string) =>
  JSON.stringify({ nftables: [{ metainfo: { json_schema_version: 1 } }, { chain: { family: 'inet', table, name: 'output', handle: 1 } }] });

/** A pod netns holding `iptables` (an ISTIO_* jump) and/or nft chains in `nftTable`. */
function pod(held: { iptables?: boolean; nftTable?: string }) {
  return createRecordingCommandRunner(({ argv }: RecordedCall) => {
    if (argv[0] === 'nft') return { stdout: held.nftTable === undefined ? '{"nftables": []}' : chainsOf(held.nftTable), stderr: '' };
    if (argv[0] === 'iptables-nft-save') return { stdout: held.iptables === true ? capture : '', stderr: '' };
    return undefined;
  });
}

const heldIn = (runner: ReturnType<typeof pod>, node: 'nft' | 'iptables') =>
  sidecarRulesHeldIn(runner, { netns, node, iptables: async () => iptablesNft });

test('a sidecar pod is judged in the kind that holds its capture: the node kind first, the other only when it alone holds ours', async () => {
  assert.equal(await heldIn(pod({ iptables: true }), 'nft'), 'iptables', 'captured with iptables before the node switched to nft');
  assert.equal(await heldIn(pod({ nftTable: 'istio-proxy-nat' }), 'iptables'), 'nft', 'and the reverse');
  assert.equal(await heldIn(pod({}), 'nft'), 'nft', 'nothing held: the node kind');
  assert.equal(await heldIn(pod({ iptables: true, nftTable: 'istio-proxy-nat' }), 'nft'), 'nft', 'both: the node kind');
  const runner = pod({ nftTable: 'istio-proxy-nat' });
  assert.equal(await heldIn(runner, 'nft'), 'nft');
  assert.deepEqual(
    runner.calls.map((c) => [c.argv.join(' '), c.options.netns]),
    [['nft -j list chains', netns]],
    'the node kind holding it costs one read',
  );
});

test('only tables this project writes count: an imitation of our name, or no iptables at all, holds nothing of ours', async () => {
  assert.equal(await heldIn(pod({ nftTable: 'istio-proxy-natx' }), 'iptables'), 'iptables');
  const noIptables = sidecarRulesHeldIn(pod({}), {
    netns,
    node: 'nft',
    iptables: async () => {
      throw new Error('no iptables binaries');
    },
  });
  assert.equal(await noIptables, 'nft');
});

test('the nft host table is found by its exact name in the host netns; no nft, or a forged line, is no table', async () => {
  const listing = (stdout: string | Error) =>
    createRecordingCommandRunner(() => (stdout instanceof Error ? stdout : { stdout, stderr: '' }));
  const runner = listing('table inet filter\ntable inet istio-ambient-nat\n');
  assert.equal(await holdsNftHostTable(runner, { hostNetns: '/host/proc/1/ns/net' }), true);
  assert.deepEqual(runner.calls[0]?.argv, ['nft', 'list', 'tables', 'inet']);
  assert.equal(runner.calls[0]?.options.netns, '/host/proc/1/ns/net');
  assert.equal(await holdsNftHostTable(listing('table inet istio-ambient-nat-x\ntable inet x istio-ambient-nat\n')), false);
  const failed = new CommandError('ERR_DATAPLANE_COMMAND_FAILED', {
    argv: ['nft'],
    exitCode: 1,
    stdout: '',
    stderr: 'Operation not permitted',
  });
  assert.equal(await holdsNftHostTable(listing(failed)), false);
});
