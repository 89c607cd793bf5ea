import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandError, checkNftCapabilities, createRecordingCommandRunner, DataplaneError, tooOldNftVersion } from '@istio-cni/dataplane';

const metainfo = '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}]}';

function nft(answers: { version?: string; json?: string | Error; check?: Error }) {
  return createRecordingCommandRunner(({ argv }) => {
    if (argv[1] === '--version') return { stdout: answers.version ?? 'nftables v1.0.6 (Lester Gooch #5)\n', stderr: '' };
    if (argv[1] === '-j') return answers.json instanceof Error ? answers.json : { stdout: answers.json ?? metainfo, stderr: '' };
    if (argv[1] === '--check') return answers.check;
    return undefined;
  });
}

const failed = (stderr: string) => new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv: ['nft'], exitCode: 1, stdout: '', stderr });

async function refusal(answers: Parameters<typeof nft>[0]): Promise<string> {
  try {
    await checkNftCapabilities(nft(answers));
  } catch (err) {
    assert.ok(err instanceof DataplaneError);
    assert.equal(err.code, 'ERR_DATAPLANE_NFT_UNSUPPORTED');
    return err.message;
  }
  assert.fail('accepted');
}

test("a node's nft that serves native nftables mode: version, JSON listing, a checked transaction", async () => {
  const runner = nft({});
  await checkNftCapabilities(runner);
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    ['nft --version', 'nft -j list chains', 'nft --check -f -'],
  );
  assert.equal(runner.calls[2]?.options.stdin, 'add table inet istio-cni-probe\n');
});

test('nft without JSON, too old, or unable to check a transaction is refused at start, the cause named', async () => {
  assert.match(
    await refusal({ json: failed('Error: JSON support not compiled-in\n') }),
    /^NATIVE_NFTABLES=true, but nft has no JSON output \(built without it\?\): .*JSON support not compiled-in/,
  );
  assert.match(await refusal({ json: 'table inet x {\n}\n' }), /JSON output is not json_schema_version 1/);
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
