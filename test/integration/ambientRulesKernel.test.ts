import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import {
  ambientConfigFromOptions,
  ambientHostNftRulesDeleteScript,
  ambientPodIptablesDeletePlan,
  ambientPodNftDeleteScript,
  ambientProbeSetElementScript,
  ambientProbeSetsCreateScript,
  buildAmbientHostNftRules,
  buildAmbientPodIptablesRules,
  buildAmbientPodNftRules,
  DEFAULT_AMBIENT_POD_OVERRIDES,
  renderAmbientHostNftTransaction,
  renderAmbientPodNftTransaction,
  renderIptablesRestore,
} from '@istio-cni/capture';
import { kernelSkip } from '../support/hostTools.ts';

/** Root only: the kernel and nft/iptables parsers accept every document, in a throwaway netns. */
const skip = kernelSkip;

/** Runs each script through `sh -c` positional args (never interpolated) in one new netns. */
function inThrowawayNetns(
  steps: ReadonlyArray<readonly [command: string, stdin: string]>,
  finalCommand: string,
  extraArgs: readonly string[] = [],
): string {
  const body = steps.map(([command], i) => `printf '%s' "$${i + 1}" | ${command} || exit ${10 + i};`).join(' ');
  return execFileSync('unshare', ['-n', 'sh', '-c', `${body} ${finalCommand}`, 'sh', ...steps.map(([, stdin]) => stdin), ...extraArgs], {
    encoding: 'utf8',
  });
}

test('nft accepts the pod and host transactions, twice, and the delete scripts, twice', { skip }, () => {
  const cfg = ambientConfigFromOptions({ enableIPv6: true, redirectDns: true });
  const pod = renderAmbientPodNftTransaction(
    buildAmbientPodNftRules(cfg, { ...DEFAULT_AMBIENT_POD_OVERRIDES, virtualInterfaces: ['eth1'] }),
  );
  const podOut = inThrowawayNetns(
    [
      ['nft -f -', pod],
      ['nft -f -', pod],
    ],
    'nft list ruleset',
  );
  assert.equal((podOut.match(/redirect to :15006/g) ?? []).length, 2);
  assert.equal(
    inThrowawayNetns(
      [
        ['nft -f -', pod],
        ['nft -f -', ambientPodNftDeleteScript()],
        ['nft -f -', ambientPodNftDeleteScript()],
      ],
      'nft list ruleset',
    ),
    '',
  );

  const host = renderAmbientHostNftTransaction(buildAmbientHostNftRules(cfg, 0));
  const element = ambientProbeSetElementScript(cfg, 'add', '10.1.2.3', 'pod-uid-1') ?? '';
  const hostOut = inThrowawayNetns(
    [
      ['nft -f -', ambientProbeSetsCreateScript(cfg)],
      ['nft -f -', element],
      ['nft -f -', host],
      ['nft -f -', host],
      ['nft -f -', ambientProbeSetsCreateScript(cfg)],
    ],
    'nft list ruleset',
  );
  assert.match(hostOut, /elements = \{ 10\.1\.2\.3 comment "pod-uid-1" \}/);
  assert.equal((hostOut.match(/snat/g) ?? []).length, 2);
  const afterDelete = inThrowawayNetns(
    [
      ['nft -f -', ambientProbeSetsCreateScript(cfg)],
      ['nft -f -', element],
      ['nft -f -', host],
      ['nft -f -', ambientHostNftRulesDeleteScript()],
    ],
    'nft list ruleset',
  );
  assert.doesNotMatch(afterDelete, /snat/);
  assert.match(afterDelete, /10\.1\.2\.3/);
});

test('iptables-restore accepts the in-pod documents and the delete plan removes everything', { skip }, () => {
  const cfg = ambientConfigFromOptions({ enableIPv6: true, redirectDns: true });
  const rules = buildAmbientPodIptablesRules(cfg, { ...DEFAULT_AMBIENT_POD_OVERRIDES, virtualInterfaces: ['eth1'] });
  const plan = ambientPodIptablesDeletePlan(cfg);
  // One `<binary> <args...>` per line, word-split by the loop; the plan holds only fixed words.
  const deletes = [...plan.v4.map((a) => ['iptables', ...a]), ...plan.v6.map((a) => ['ip6tables', ...a])]
    .map((argv) => argv.join(' '))
    .join('\n');
  const out = inThrowawayNetns(
    [
      ['iptables-restore --noflush', renderIptablesRestore(rules.v4)],
      ['ip6tables-restore --noflush', renderIptablesRestore(rules.v6)],
    ],
    'iptables-save | grep -c ISTIO; ip6tables-save | grep -c ISTIO; ' +
      `printf '%s\n' "$3" | while read -r cmd; do $cmd 2>/dev/null; done; ` +
      '{ iptables-save; ip6tables-save; } | grep -c ISTIO; true',
    [deletes],
  );
  // Six chain declarations (ISTIO_PRERT/ISTIO_OUTPUT in mangle, nat, raw) plus every rule.
  assert.deepEqual(out.trim().split('\n'), [String(rules.v4.length + 6), String(rules.v6.length + 6), '0']);
});
