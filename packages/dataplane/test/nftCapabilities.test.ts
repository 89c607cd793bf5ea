import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandError, createRecordingCommandRunner, DataplaneError, decideNativeNftables, tooOldNftVersion } from '@istio-cni/dataplane';

const metainfo = '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}]}';
const probeSets = ['istio-inpod-probes-v4'];

const failed = (stderr: string) => new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv: ['nft'], exitCode: 1, stdout: '', stderr });

function node(answers: { version?: string; json?: string | Error; check?: Error; ipsets?: string[] }) {
  return createRecordingCommandRunner(({ argv }) => {
    if (argv[1] === '--version') return { stdout: answers.version ?? 'nftables v1.0.6 (Lester Gooch #5)\n', stderr: '' };
    if (argv[1] === '-j') return answers.json instanceof Error ? answers.json : { stdout: answers.json ?? metainfo, stderr: '' };
    if (argv[1] === '--check') return answers.check;
    if (argv[0] === 'ipset')
      return (answers.ipsets ?? []).includes(argv[3] ?? '') ? undefined : failed('The set with the given name does not exist');
    return undefined;
  });
}

async function refusal(answers: Parameters<typeof node>[0]): Promise<string> {
  try {
    await decideNativeNftables(node(answers), { probeSets });
  } catch (err) {
    assert.ok(err instanceof DataplaneError);
    assert.equal(err.code, 'ERR_DATAPLANE_NFT_UNSUPPORTED');
    return err.message;
  }
  assert.fail('accepted');
}

test('native nftables on a node whose nft serves it: version, a checked transaction, JSON listing, no iptables probe set', async () => {
  const runner = node({});
  assert.deepEqual(await decideNativeNftables(runner, { probeSets, hostNetns: '/host/proc/1/ns/net' }), { nftables: true });
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    ['nft --version', 'nft --check -f -', 'nft -j list chains', 'ipset list -n istio-inpod-probes-v4'],
  );
  assert.equal(runner.calls[1]?.options.stdin, 'add table inet istio-cni-probe\n');
  assert.equal(runner.calls[3]?.options.netns, '/host/proc/1/ns/net', 'the probe sets are looked for in the host netns');
});

test('nft without JSON output, or the iptables probe set still on the node: stay on iptables, with the reason (as upstream)', async () => {
  assert.deepEqual(await decideNativeNftables(node({ json: failed('Error: JSON support not compiled-in\n') }), { probeSets }), {
    nftables: false,
    reason: 'nft has no JSON output (built without it?): failed to run "nft": exit code 1: Error: JSON support not compiled-in',
  });
  const notJson = await decideNativeNftables(node({ json: 'table inet x {\n}\n' }), { probeSets });
  assert.equal(notJson.nftables, false);
  assert.deepEqual(await decideNativeNftables(node({ ipsets: ['istio-inpod-probes-v4'] }), { probeSets }), {
    nftables: false,
    reason: "the iptables backend's probe ipset istio-inpod-probes-v4 exists (reboot the node to complete the switch)",
  });
});

test('nft too old or unable to check a transaction is refused at start, the cause named (as upstream knftables)', async () => {
  assert.match(await refusal({ version: 'nftables v0.9.8 (E.D.S.)\n' }), /nft v0\.9\.8 is too old \(1\.0\.1 or later is needed\)/);
  assert.match(
    await refusal({ check: failed('Error: Could not process rule: Operation not permitted\n') }),
    /cannot check a transaction .*Operation not permitted/,
  );
});

test('nft versions older than 1.0.1 are named; others, and unreadable output, are not', () => {
  assert.equal(tooOldNftVersion('nftables v1.0.0 (Fearless Fosdick #2)'), 'v1.0.0');
  assert.equal(tooOldNftVersion('nftables v0.9.3 (Topsy)'), 'v0.9.3');
  assert.equal(tooOldNftVersion('nftables v1.0.1 (Fearless Fosdick #3)'), undefined);
  assert.equal(tooOldNftVersion('nftables v1.1.3 (Commodore Bullmoose #4)'), undefined);
  assert.equal(tooOldNftVersion('something else'), undefined);
});
