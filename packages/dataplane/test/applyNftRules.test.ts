import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyNftRules,
  createRecordingCommandRunner,
  DataplaneError,
  nftScriptTables,
  type OpenScratchNetns,
  verifyNftRules,
} from '@istio-cni/dataplane';

const netns = '/var/run/netns/pod';
const script =
  'add table inet istio-proxy-nat\nflush table inet istio-proxy-nat\nadd chain inet istio-proxy-nat output { type nat hook output priority -100 ; }\n';
const listing = 'table inet istio-proxy-nat {\n\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n\t}\n}';
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });

function pod(tables: string, podListing = listing) {
  return createRecordingCommandRunner(({ argv, options }) => {
    if (argv[1] === 'list' && argv[2] === 'tables') return { stdout: options.netns === netns ? tables : '', stderr: '' };
    if (argv.includes('list')) return { stdout: options.netns === netns ? podListing : listing, stderr: '' };
    return undefined;
  });
}

test('nftScriptTables lists the tables a script adds', () => {
  assert.deepEqual(nftScriptTables(`${script}add table inet istio-proxy-mangle\n`), ['inet istio-proxy-nat', 'inet istio-proxy-mangle']);
});

test('a netns without istio tables gets the script as one nft -f - transaction', async () => {
  const runner = pod('table ip nat\n');
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'applied');
  assert.deepEqual(runner.calls.at(-1), { argv: ['nft', '-f', '-'], options: { netns, stdin: script } });
});

test('identical tables are left alone', async () => {
  const runner = pod('table inet istio-proxy-nat\n');
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'unchanged');
  assert.ok(runner.calls.every((c) => !(c.options.netns === netns && c.argv.includes('-f'))));
});

test('different tables are refused without reconcile and replaced atomically with it', async () => {
  const other = listing.replace('-100', '-99');
  await assert.rejects(
    applyNftRules({ runner: pod('table inet istio-proxy-nat\n', other), openScratchNetns: scratch }, { netns, script }),
    (err: unknown) => {
      assert.ok(err instanceof DataplaneError);
      assert.equal(err.code, 'ERR_DATAPLANE_STATE_CONFLICT');
      assert.match(err.message, /table inet istio-proxy-nat: found "type nat hook output priority -99; policy accept;"/);
      return true;
    },
  );
  const runner = pod('table inet istio-proxy-nat\ntable inet istio-proxy-old\n', other);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true }), 'reconciled');
  assert.equal(
    runner.calls.at(-1)?.options.stdin,
    `add table inet istio-proxy-nat\ndelete table inet istio-proxy-nat\nadd table inet istio-proxy-old\ndelete table inet istio-proxy-old\n${script}`,
  );
});

test('verify reports missing and unexpected tables', async () => {
  assert.deepEqual(await verifyNftRules({ runner: pod('table inet istio-proxy-x\n'), openScratchNetns: scratch }, { netns, script }), [
    'missing table inet istio-proxy-nat',
    'unexpected table inet istio-proxy-x',
  ]);
});
