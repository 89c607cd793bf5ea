import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CommandError,
  createRecordingCommandRunner,
  DataplaneError,
  detectIptablesBackend,
  hasIptablesRules,
  parseIptablesVersion,
  type RecordedCall,
} from '@istio-cni/dataplane';

const legacyWithRules = '*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j KUBE-SERVICES\nCOMMIT\n';
const legacyEmptyTable =
  '# Generated\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n';

function fail(call: RecordedCall): CommandError {
  return new CommandError('ERR_DATAPLANE_COMMAND_NOT_FOUND', { argv: call.argv, exitCode: null, stdout: '', stderr: '' });
}

function system(options: { legacySave?: string; broken?: string[] }) {
  return createRecordingCommandRunner((call) => {
    const [program = '', ...args] = call.argv;
    const subject = program === 'unshare' ? (args[2] ?? '') : program;
    if (options.broken?.some((b) => subject.startsWith(b))) return fail(call);
    if (args[0] === '--version')
      return { stdout: `${program} v1.8.9 (${program.includes('legacy') ? 'legacy' : 'nf_tables'})\n`, stderr: '' };
    if (program === 'iptables-legacy-save') return { stdout: options.legacySave ?? '', stderr: '' };
    return undefined;
  });
}

test('FORCE_IPTABLES_BINARY=legacy selects the legacy binaries', async () => {
  const backend = await detectIptablesBackend(system({}), { forceBinary: 'legacy' });
  assert.equal(backend.flavor, 'legacy');
  assert.equal(backend.nfTables, false);
  assert.deepEqual(backend.binaries.ipv6, {
    iptables: 'ip6tables-legacy',
    save: 'ip6tables-legacy-save',
    restore: 'ip6tables-legacy-restore',
  });
});

test('an unknown FORCE_IPTABLES_BINARY is refused naming the value, before running anything', async () => {
  const runner = system({});
  await assert.rejects(detectIptablesBackend(runner, { forceBinary: 'nftables' }), (err: unknown) => {
    assert.ok(err instanceof DataplaneError);
    assert.equal(err.code, 'ERR_DATAPLANE_INVALID_ARGUMENT');
    assert.match(err.message, /"nftables"/);
    return true;
  });
  assert.equal(runner.calls.length, 0);
});

test('legacy is chosen when the legacy tables hold rules', async () => {
  const backend = await detectIptablesBackend(system({ legacySave: legacyWithRules }), { netns: '/var/run/netns/p' });
  assert.equal(backend.flavor, 'legacy');
});

test('an empty legacy nat table (left by an old probe) does not count as legacy in use', async () => {
  assert.equal(hasIptablesRules(legacyEmptyTable), false);
  const backend = await detectIptablesBackend(system({ legacySave: legacyEmptyTable }));
  assert.equal(backend.flavor, 'nft');
  assert.equal(backend.nfTables, true);
  assert.deepEqual(backend.version, { major: 1, minor: 8, patch: 9 });
});

test('the usability probe runs in a scratch netns, never in the caller netns', async () => {
  const runner = system({});
  await detectIptablesBackend(runner);
  const probes = runner.calls.filter((c) => c.argv.includes('-A'));
  assert.ok(probes.length > 0);
  for (const p of probes) {
    assert.deepEqual(p.argv.slice(0, 3), ['unshare', '--net', '--']);
    assert.equal(p.options.netns, undefined);
  }
});

test('falls back to plain iptables when iptables-nft is unusable', async () => {
  const backend = await detectIptablesBackend(system({ broken: ['iptables-nft'] }));
  assert.equal(backend.flavor, 'plain');
  assert.equal(backend.binaries.ipv4.restore, 'iptables-restore');
});

test('no usable iptables is a clear error', async () => {
  await assert.rejects(detectIptablesBackend(system({ broken: ['iptables'] })), (err: unknown) => {
    assert.ok(err instanceof DataplaneError);
    assert.equal(err.code, 'ERR_DATAPLANE_NO_IPTABLES');
    assert.match(err.message, /^failed to find a usable iptables: nft: .*; plain: /);
    return true;
  });
});

test('parses versions and the nf_tables marker', () => {
  assert.deepEqual(parseIptablesVersion('iptables-save v1.8.9 (nf_tables)'), { version: { major: 1, minor: 8, patch: 9 }, nfTables: true });
  assert.deepEqual(parseIptablesVersion('iptables-save v1.6.1'), { version: { major: 1, minor: 6, patch: 1 }, nfTables: false });
  assert.throws(() => parseIptablesVersion('garbage'), /"garbage"/);
});
