import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyNftRules,
  createRecordingCommandRunner,
  DataplaneError,
  listTable,
  nftScriptTables,
  parseNftTableList,
  readNftTables,
  type OpenScratchNetns,
  verifyNftRules,
} from '@istio-cni/dataplane';
import { nftTablesJson } from '../../../test/support/nftTablesJson.ts';

const netns = '/var/run/netns/pod';
const script =
  'add table inet istio-proxy-nat\nflush table inet istio-proxy-nat\nadd chain inet istio-proxy-nat output { type nat hook output priority -100 ; }\n';
const listing = 'table inet istio-proxy-nat {\n\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n\t}\n}';
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });

function pod(tables: string, podListing = listing) {
  return createRecordingCommandRunner(({ argv, options }) => {
    if (argv.join(' ') === 'nft -j list tables') return { stdout: options.netns === netns ? tables : nftTablesJson(), stderr: '' };
    if (argv.includes('list')) return { stdout: options.netns === netns ? podListing : listing, stderr: '' };
    return undefined;
  });
}

test('nftScriptTables lists the tables a script adds', () => {
  assert.deepEqual(nftScriptTables(`${script}add table inet istio-proxy-mangle\n`), ['inet istio-proxy-nat', 'inet istio-proxy-mangle']);
});

test('a netns without istio tables gets the script as one nft -f - transaction', async () => {
  const runner = pod(nftTablesJson('ip nat'));
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'applied');
  assert.deepEqual(runner.calls.at(-1), { argv: ['nft', '-f', '-'], options: { netns, stdin: script } });
});

test('identical tables are left alone', async () => {
  const runner = pod(nftTablesJson('inet istio-proxy-nat'));
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'unchanged');
  assert.ok(runner.calls.every((c) => !(c.options.netns === netns && c.argv.includes('-f'))));
});

test('different tables are refused without reconcile and replaced atomically with it', async () => {
  const other = listing.replace('-100', '-99');
  await assert.rejects(
    applyNftRules({ runner: pod(nftTablesJson('inet istio-proxy-nat'), other), openScratchNetns: scratch }, { netns, script }),
    (err: unknown) => {
      assert.ok(err instanceof DataplaneError);
      assert.equal(err.code, 'ERR_DATAPLANE_STATE_CONFLICT');
      assert.match(err.message, /table inet istio-proxy-nat: found "type nat hook output priority -99; policy accept;"/);
      return true;
    },
  );
  const runner = pod(nftTablesJson('inet istio-proxy-nat', 'inet istio-proxy-old'), other);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true }), 'reconciled');
  assert.equal(runner.calls.at(-1)?.options.stdin, `delete table inet handle 1\ndelete table inet handle 2\n${script}`);
});

test('verify reports missing and unexpected tables', async () => {
  assert.deepEqual(
    await verifyNftRules({ runner: pod(nftTablesJson('inet istio-proxy-x')), openScratchNetns: scratch }, { netns, script }),
    ['missing table inet istio-proxy-nat', 'unexpected table inet "istio-proxy-x" (handle 1)'],
  );
});

// A tenant with NET_ADMIN in its pod names tables as it likes (nft's JSON input takes any string).
const hostile = [
  { family: 'inet', name: 'istio-proxy-x;include"/etc/hostname"', handle: 7 },
  { family: 'inet', name: 'istio-proxy-nat {\n}\ntable inet istio-proxy-nat {', handle: 8 },
  { family: 'inet', name: `istio-proxy-${'a'.repeat(300)}`, handle: 9 },
  { family: 'ip', name: 'istio-proxy-nat', handle: 10 },
];

test('tables are read from nft -j list tables: names are data, malformed entries an error, nothing at all no tables', () => {
  assert.deepEqual(parseNftTableList(nftTablesJson(...hostile)), hostile);
  assert.deepEqual(parseNftTableList(''), []);
  for (const bad of [
    '{"nftables":[{"table":{"family":"inet","name":"x","handle":"1"}}]}',
    '{"nftables":[{"table":{"family":"inet; include","name":"x","handle":1}}]}',
    '{"nftables":[{"table":{"family":"inet","name":7,"handle":1}}]}',
    '{"nftables":[{"table":{"family":"inet","name":"x","handle":-3}}]}',
    '{"tables":[]}',
    'table inet istio-proxy-nat',
  ]) {
    assert.throws(
      () => parseNftTableList(bad),
      (err: unknown) => err instanceof DataplaneError && err.code === 'ERR_DATAPLANE_UNPARSABLE_STATE',
      bad,
    );
  }
});

test('reconcile deletes tables imitating ours by handle: no name read back reaches nft, in argv or stdin', async () => {
  const runner = pod(nftTablesJson({ family: 'inet', name: 'istio-proxy-nat', handle: 3 }, ...hostile));
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true }), 'reconciled');
  assert.equal(
    runner.calls.at(-1)?.options.stdin,
    `delete table inet handle 3\ndelete table inet handle 7\ndelete table inet handle 8\ndelete table inet handle 9\ndelete table ip handle 10\n${script}`,
  );
  const sent = runner.calls.map((c) => `${c.argv.join(' ')}\n${c.options.stdin ?? ''}`).join('\n');
  for (const t of hostile.filter((h) => h.name !== 'istio-proxy-nat')) {
    assert.ok(!sent.includes(t.name), `${JSON.stringify(t.name.slice(0, 40))} never sent to nft`);
  }
  assert.ok(!sent.includes('include'));
});

test('verify reports each imitation JSON-escaped, cut to 64 characters, with its handle', async () => {
  const differences = await verifyNftRules(
    { runner: pod(nftTablesJson({ family: 'inet', name: 'istio-proxy-nat', handle: 3 }, ...hostile)), openScratchNetns: scratch },
    { netns, script },
  );
  assert.deepEqual(differences, [
    'unexpected table inet "istio-proxy-x;include\\"/etc/hostname\\"" (handle 7)',
    'unexpected table inet "istio-proxy-nat {\\n}\\ntable inet istio-proxy-nat {" (handle 8)',
    `unexpected table inet "istio-proxy-${'a'.repeat(52)}…" (handle 9)`,
    'unexpected table ip "istio-proxy-nat" (handle 10)',
  ]);
  assert.ok(differences.every((d) => !d.includes('\n')));
});

test('readNftTables lists only our own tables, each by its validated name; an imitation is an empty, escaped entry', async () => {
  const runner = pod(nftTablesJson({ family: 'inet', name: 'istio-proxy-nat', handle: 3 }, ...hostile));
  const found = await readNftTables(runner, 'nft', netns, 'istio-proxy-');
  assert.deepEqual(
    [...found.keys()],
    [
      'inet istio-proxy-nat',
      'inet "istio-proxy-x;include\\"/etc/hostname\\"" (handle 7)',
      'inet "istio-proxy-nat {\\n}\\ntable inet istio-proxy-nat {" (handle 8)',
      `inet "istio-proxy-${'a'.repeat(52)}…" (handle 9)`,
      'ip "istio-proxy-nat" (handle 10)',
    ],
  );
  assert.equal(found.get('inet istio-proxy-nat'), listing);
  assert.deepEqual(
    runner.calls.filter((c) => c.argv.includes('list') && c.argv.includes('table')).map((c) => c.argv.join(' ')),
    ['nft -s list table inet istio-proxy-nat'],
  );
  await assert.rejects(listTable(runner, 'nft', netns, 'inet istio-proxy-x;include"/etc/hostname"'), /not a table of ours/);
});
