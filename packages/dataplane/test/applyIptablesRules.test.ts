import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  applyIptablesRules,
  CommandError,
  createRecordingCommandRunner,
  DataplaneError,
  type IptablesBackend,
  iptablesBinaries,
  type OpenScratchNetns,
  verifyIptablesRules,
} from '@istio-cni/dataplane';

const legacy: IptablesBackend = {
  flavor: 'legacy',
  nfTables: false,
  version: { major: 1, minor: 8, patch: 9 },
  binaries: iptablesBinaries('legacy'),
};
const nft: IptablesBackend = { ...legacy, flavor: 'nft', nfTables: true, binaries: iptablesBinaries('nft') };
const netns = '/var/run/netns/pod';
const document = '* nat\n-N ISTIO_REDIRECT\n-A OUTPUT -j ISTIO_REDIRECT\n-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n';
const canonical =
  '*nat\n:OUTPUT ACCEPT [0:0]\n:ISTIO_REDIRECT - [0:0]\n-A OUTPUT -j ISTIO_REDIRECT\n-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n';
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });

/**
 * A pod netns whose `-save` prints `podSave`; like the kernel, a `--noflush` restore that creates an
 * ISTIO chain the pod already has fails (and changes nothing).
 */
function podWith(podSave: string) {
  return createRecordingCommandRunner(({ argv, options }) => {
    if (argv[0]?.endsWith('-restore') && options.netns === netns && /:ISTIO/.test(podSave) && /^-N ISTIO/m.test(options.stdin ?? '')) {
      return new CommandError('ERR_DATAPLANE_COMMAND_FAILED', {
        argv,
        netns,
        exitCode: 1,
        stdout: '',
        stderr: 'iptables-restore: line 2 failed',
      });
    }
    if (!argv[0]?.endsWith('-save')) return undefined;
    return { stdout: options.netns === netns ? podSave : canonical, stderr: '' };
  });
}

test('an empty netns gets the document through restore --noflush, with a per-netns lock for legacy', async () => {
  const runner = podWith('');
  const result = await applyIptablesRules({ runner, openScratchNetns: scratch }, { netns, backend: legacy, documents: { ipv4: document } });
  assert.deepEqual(result.outcome, { ipv4: 'applied', ipv6: 'skipped' });
  const restore = runner.calls.at(-1);
  assert.deepEqual(restore?.argv, ['iptables-legacy-restore', '--noflush', '--wait=30']);
  assert.deepEqual(restore?.options, { netns, env: { XTABLES_LOCKFILE: netns }, enterNetnsOwner: true, stdin: document });
});

test('iptables-nft takes no lock and no --wait', async () => {
  const runner = podWith('');
  await applyIptablesRules({ runner, openScratchNetns: scratch }, { netns, backend: nft, documents: { ipv4: document, ipv6: document } });
  const restores = runner.calls.filter((c) => c.argv[0]?.endsWith('-restore'));
  assert.deepEqual(
    restores.map((c) => c.argv),
    [
      ['iptables-nft-restore', '--noflush'],
      ['ip6tables-nft-restore', '--noflush'],
    ],
  );
  assert.equal(restores[0]?.options.env, undefined);
});

test('the same state again is a no-op', async () => {
  const runner = podWith(canonical);
  const result = await applyIptablesRules({ runner, openScratchNetns: scratch }, { netns, backend: nft, documents: { ipv4: document } });
  assert.equal(result.outcome.ipv4, 'unchanged');
  // Only the refused optimistic restore reached the pod; the checked path wrote nothing.
  assert.equal(runner.calls.filter((c) => c.options.netns === netns && c.argv[0]?.endsWith('-restore')).length, 1);
});

test('a single-table document into a fresh netns skips the state read (one exec)', async () => {
  const runner = podWith('');
  const result = await applyIptablesRules({ runner, openScratchNetns: scratch }, { netns, backend: nft, documents: { ipv4: document } });
  assert.equal(result.outcome.ipv4, 'applied');
  assert.deepEqual(
    runner.calls.map((c) => c.argv[0]),
    ['iptables-nft-restore'],
  );
});

test('a different state without reconcile is refused and nothing is written', async () => {
  const runner = podWith(canonical.replace('15001', '15999'));
  await assert.rejects(
    applyIptablesRules({ runner, openScratchNetns: scratch }, { netns, backend: nft, documents: { ipv4: document } }),
    (err: unknown) => {
      assert.ok(err instanceof DataplaneError);
      assert.equal(err.code, 'ERR_DATAPLANE_STATE_CONFLICT');
      assert.match(err.message, /^failed to apply ipv4 sidecar rules in netns "\/var\/run\/netns\/pod": .*--to-ports 15999/);
      return true;
    },
  );
  assert.equal(runner.calls.filter((c) => c.options.netns === netns && c.argv[0]?.endsWith('-restore')).length, 1);
});

test('reconcile rewrites a different state in one restore', async () => {
  const runner = podWith(canonical.replace('15001', '15999'));
  const result = await applyIptablesRules(
    { runner, openScratchNetns: scratch },
    { netns, backend: nft, documents: { ipv4: document }, reconcile: true },
  );
  assert.equal(result.outcome.ipv4, 'reconciled');
  const restore = runner.calls.at(-1);
  assert.equal(restore?.options.netns, netns);
  assert.match(restore?.options.stdin ?? '', /^\* nat\n-D OUTPUT 1\n-F ISTIO_REDIRECT\n-A OUTPUT/);
});

test('verify lists differences per family; the canonical form is cached', async () => {
  const runner = podWith(canonical.replace('-A OUTPUT -j ISTIO_REDIRECT\n', ''));
  const deps = { runner, openScratchNetns: scratch, canonicalCache: new Map() };
  assert.deepEqual(await verifyIptablesRules(deps, { netns, backend: nft, documents: { ipv4: document } }), [
    'ipv4 nat OUTPUT: missing rule 1 "-j ISTIO_REDIRECT"',
  ]);
  const before = runner.calls.length;
  await verifyIptablesRules(deps, { netns, backend: nft, documents: { ipv4: document } });
  assert.equal(runner.calls.length - before, 1, 'second verify only reads the pod state');
});
