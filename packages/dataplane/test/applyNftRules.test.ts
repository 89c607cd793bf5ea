import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyNftRules,
  CommandError,
  createRecordingCommandRunner,
  DataplaneError,
  listTable,
  nftScriptTables,
  parseNftChainTables,
  parseNftTableHeaders,
  readNftTables,
  type OpenScratchNetns,
  verifyNftRules,
} from '@istio-cni/dataplane';
import { type FakeNftTable, nftChainListings } from '../../../test/support/nftChainListings.ts';

const netns = '/var/run/netns/pod';
const script =
  'add table inet istio-proxy-nat\nflush table inet istio-proxy-nat\nadd chain inet istio-proxy-nat output { type nat hook output priority -100 ; }\n';
const listing = 'table inet istio-proxy-nat {\n\tchain output {\n\t\ttype nat hook output priority -100; policy accept;\n\t}\n}';
function missing(argv: readonly string[]): CommandError {
  const stderr = 'internal:0:0-0: Error: Could not process rule: No such file or directory\n';
  return new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv, exitCode: 1, stdout: '', stderr });
}
const old = { family: 'inet', name: 'istio-proxy-old' };
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });

function pod(tables: FakeNftTable[], podListing = listing) {
  return createRecordingCommandRunner(({ argv, options }) => {
    const chains = nftChainListings(...(options.netns === netns ? tables : []));
    if (argv.join(' ') === 'nft -j list chains') return { stdout: chains.json, stderr: '' };
    if (argv.join(' ') === 'nft list chains') return { stdout: chains.text, stderr: '' };
    if (argv[1] === '-c') return chains.deletable(argv[3] ?? '') ? { stdout: '', stderr: '' } : missing(argv);
    if (argv.includes('list')) return { stdout: options.netns === netns ? podListing : listing, stderr: '' };
    return undefined;
  });
}

test('nftScriptTables lists the tables a script adds', () => {
  assert.deepEqual(nftScriptTables(`${script}add table inet istio-proxy-mangle\n`), ['inet istio-proxy-nat', 'inet istio-proxy-mangle']);
});

test('a netns without istio tables gets the script as one nft -f - transaction', async () => {
  const runner = pod(['ip nat']);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'applied');
  assert.deepEqual(runner.calls.at(-1), { argv: ['nft', '-f', '-'], options: { netns, stdin: script } });
});

test('identical tables are left alone', async () => {
  const runner = pod(['inet istio-proxy-nat']);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'unchanged');
  assert.ok(runner.calls.every((c) => !(c.options.netns === netns && c.argv.includes('-f'))));
});

test('different tables are refused without reconcile and replaced atomically with it', async () => {
  const other = listing.replace('-100', '-99');
  await assert.rejects(
    applyNftRules({ runner: pod(['inet istio-proxy-nat'], other), openScratchNetns: scratch }, { netns, script }),
    (err: unknown) => {
      assert.ok(err instanceof DataplaneError);
      assert.equal(err.code, 'ERR_DATAPLANE_STATE_CONFLICT');
      assert.match(err.message, /table inet istio-proxy-nat: found "type nat hook output priority -99; policy accept;"/);
      return true;
    },
  );
  const runner = pod(['inet istio-proxy-nat', 'inet istio-proxy-old'], other);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true }), 'reconciled');
  const writes = runner.calls.filter(
    (c) => (c.argv.includes('-f') || (c.argv[1] === '-j' && c.argv.length === 3)) && c.options.netns === netns,
  );
  assert.deepEqual(
    writes.map((c) => [...c.argv, c.options.stdin]),
    [
      ['nft', '-j', JSON.stringify({ nftables: [{ add: { table: old } }, { delete: { table: old } }] }), undefined],
      ['nft', '-f', '-', `add table inet istio-proxy-nat\ndelete table inet istio-proxy-nat\n${script}`],
    ],
  );
});

test('verify reports missing and unexpected tables', async () => {
  assert.deepEqual(
    await verifyNftRules(
      { runner: pod(['inet istio-proxy-x', { family: 'inet', name: 'istio-proxy-empty', chains: false }]), openScratchNetns: scratch },
      { netns, script },
    ),
    [
      'missing table inet istio-proxy-nat',
      'unexpected table inet "istio-proxy-x"',
      'unexpected table inet "istio-proxy-empty" (no chains)',
    ],
  );
});

// A tenant with NET_ADMIN in its pod names tables as it likes (nft's JSON input takes any string).
const hostile = [
  { family: 'inet', name: 'istio-proxy-x;include"/etc/hostname"' },
  { family: 'inet', name: 'istio-proxy-nat {\n}\ntable inet istio-proxy-forged {' },
  { family: 'inet', name: `istio-proxy-${'a'.repeat(200)}` },
  { family: 'ip', name: 'istio-proxy-nat' },
];
const hostileNetns: FakeNftTable[] = [
  'inet istio-proxy-nat',
  ...hostile,
  { family: 'inet', name: 'istio-proxy-y;include"/etc/hostname"', chains: false },
];

test('tables are read from nft -j list chains: names are data, malformed entries an error, nothing at all no tables', () => {
  assert.deepEqual(parseNftChainTables(nftChainListings('inet istio-proxy-nat', ...hostile, 'inet istio-proxy-nat').json), [
    { family: 'inet', name: 'istio-proxy-nat' },
    ...hostile,
  ]);
  assert.deepEqual(parseNftChainTables(''), []);
  for (const bad of [
    '{"nftables":[{"chain":{"family":"inet; include","table":"x","name":"c"}}]}',
    '{"nftables":[{"chain":{"family":"inet","table":7,"name":"c"}}]}',
    '{"nftables":[{"chain":{"family":"inet","table":"","name":"c"}}]}',
    '{"nftables":{}}',
    'table inet x {',
  ]) {
    assert.throws(
      () => parseNftChainTables(bad),
      (err: unknown) => err instanceof DataplaneError && err.code === 'ERR_DATAPLANE_UNPARSABLE_STATE',
      bad,
    );
  }
});

test('header lines of nft list chains: every table, forged lines included, none longer than a kernel name', () => {
  const text = nftChainListings(...hostileNetns, { family: 'ip', name: `x${'b'.repeat(300)}`, chains: false }).text;
  assert.deepEqual(parseNftTableHeaders(`${text}\tchain c {\ntable nope x {\n`), [
    { family: 'inet', name: 'istio-proxy-nat' },
    { family: 'inet', name: 'istio-proxy-x;include"/etc/hostname"' },
    { family: 'inet', name: 'istio-proxy-nat' },
    { family: 'inet', name: 'istio-proxy-forged {' },
    { family: 'inet', name: `istio-proxy-${'a'.repeat(200)}` },
    { family: 'ip', name: 'istio-proxy-nat' },
    { family: 'inet', name: 'istio-proxy-y;include"/etc/hostname"' },
  ]);
});

test('tables are found without nft list tables (nft 1.0.6 reads every rule for it), only from the chain listings', async () => {
  const runner = pod(['inet istio-proxy-nat', 'inet tenant']);
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), 'unchanged');
  const inPod = runner.calls.filter((c) => c.options.netns === netns).map((c) => c.argv.join(' '));
  assert.deepEqual(inPod, ['nft -j list chains', 'nft list chains', 'nft -s list table inet istio-proxy-nat']);
});

test('reconcile removes imitations by name through nft JSON input, then replaces ours in one transaction: no name read back reaches nft as syntax', async () => {
  const runner = pod(hostileNetns, listing.replace('-100', '-99'));
  assert.equal(await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true }), 'reconciled');
  const inPod = runner.calls.filter((c) => c.options.netns === netns && (c.argv.includes('-f') || c.argv.includes('-j')));
  const json = (i: number) => JSON.parse(inPod[i]?.argv.at(-1) ?? '') as unknown;
  // Tables without chains, from header lines: checked all at once, then (a forged line among them) one by one.
  const forged = { family: 'inet', name: 'istio-proxy-forged {' };
  const chainless = { family: 'inet', name: 'istio-proxy-y;include"/etc/hostname"' };
  assert.deepEqual(
    inPod.map((c) => c.argv.slice(0, -1).join(' ')),
    ['nft -j list', 'nft -c -j', 'nft -c -j', 'nft -c -j', 'nft -j', 'nft -f'],
  );
  assert.deepEqual(
    [json(1), json(2), json(3)],
    [
      { nftables: [{ delete: { table: forged } }, { delete: { table: chainless } }] },
      { nftables: [{ delete: { table: forged } }] },
      { nftables: [{ delete: { table: chainless } }] },
    ],
  );
  assert.deepEqual(json(4), { nftables: [...hostile, chainless].flatMap((table) => [{ add: { table } }, { delete: { table } }]) });
  assert.equal(inPod[5]?.options.stdin, `add table inet istio-proxy-nat\ndelete table inet istio-proxy-nat\n${script}`);
  const syntax = runner.calls
    .filter((c) => !c.argv.includes('-j'))
    .map((c) => `${c.argv.join(' ')}\n${c.options.stdin ?? ''}`)
    .join('\n');
  assert.ok(!syntax.includes('include') && !syntax.includes('aaaa'), syntax);
});

test('many tables without chains: checked 100 to a document, at most 32 one by one; removed 100 to a document', async () => {
  const many: FakeNftTable[] = Array.from({ length: 150 }, (_, i) => ({ family: 'ip', name: `istio-proxy-${i}`, chains: false }));
  const forger = { family: 'inet', name: 'x {\n}\ntable ip istio-proxy-ghost', chains: false };
  const runner = pod(['inet istio-proxy-nat', ...many, forger], listing.replace('-100', '-99'));
  const differences = await verifyNftRules({ runner, openScratchNetns: scratch }, { netns, script });
  assert.equal(differences.filter((d) => d.endsWith('(no chains)')).length, 100 + 32);
  const checks = runner.calls.filter((c) => c.argv[1] === '-c');
  assert.equal(checks.length, 2 + 32, 'a document of 100 (all there), one of 51 (a forged line), 32 single checks');
  await applyNftRules({ runner, openScratchNetns: scratch }, { netns, script, reconcile: true });
  const removals = runner.calls.filter((c) => c.argv[1] === '-j' && c.argv.length === 3);
  assert.deepEqual(
    removals.map((c) => (JSON.parse(c.argv[2] ?? '') as { nftables: unknown[] }).nftables.length),
    [200, 64],
  );
  assert.ok(removals.every((c) => (c.argv[2] ?? '').length < 128 * 1024));
});

test('a forged header line is not a table; with no table without chains there is nothing to check', async () => {
  const forger = { family: 'inet', name: 'istio-proxy-nat {\n}\ntable inet istio-proxy-forged', chains: false };
  const runner = pod(['inet istio-proxy-nat', forger]);
  assert.deepEqual(await verifyNftRules({ runner, openScratchNetns: scratch }, { netns, script }), []);
  const quiet = pod(['inet istio-proxy-nat', 'ip tenant', { family: 'ip', name: 'other', chains: false }]);
  await verifyNftRules({ runner: quiet, openScratchNetns: scratch }, { netns, script });
  assert.ok(quiet.calls.every((c) => !c.argv.includes('-c')));
});

test('verify reports each imitation JSON-escaped, cut to 64 characters; a table without chains as such', async () => {
  const differences = await verifyNftRules({ runner: pod(hostileNetns), openScratchNetns: scratch }, { netns, script });
  assert.deepEqual(differences, [
    'unexpected table inet "istio-proxy-x;include\\"/etc/hostname\\""',
    'unexpected table inet "istio-proxy-nat {\\n}\\ntable inet istio-proxy-forged {"',
    `unexpected table inet "istio-proxy-${'a'.repeat(52)}…"`,
    'unexpected table ip "istio-proxy-nat"',
    'unexpected table inet "istio-proxy-y;include\\"/etc/hostname\\"" (no chains)',
  ]);
  assert.ok(differences.every((d) => !d.includes('\n')));
});

test('readNftTables lists only our own tables, each by its validated name; an imitation is an empty, escaped entry', async () => {
  const runner = pod(hostileNetns);
  const found = await readNftTables(runner, 'nft', netns, 'istio-proxy-');
  assert.deepEqual(
    [...found.keys()],
    [
      'inet istio-proxy-nat',
      'inet "istio-proxy-x;include\\"/etc/hostname\\""',
      'inet "istio-proxy-nat {\\n}\\ntable inet istio-proxy-forged {"',
      `inet "istio-proxy-${'a'.repeat(52)}…"`,
      'ip "istio-proxy-nat"',
      'inet "istio-proxy-y;include\\"/etc/hostname\\"" (no chains)',
    ],
  );
  assert.equal(found.get('inet istio-proxy-nat'), listing);
  assert.deepEqual(
    runner.calls.filter((c) => c.argv.includes('list') && c.argv.includes('table')).map((c) => c.argv.join(' ')),
    ['nft -s list table inet istio-proxy-nat'],
  );
  await assert.rejects(listTable(runner, 'nft', netns, 'inet istio-proxy-x;include"/etc/hostname"'), /not a table of ours/);
});
