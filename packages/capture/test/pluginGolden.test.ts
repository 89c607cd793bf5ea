import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  buildSidecarIptablesRules,
  captureConfigFromRedirect,
  redirectFromPod,
  renderIptablesRestore,
  sidecarDecision,
} from '@istio-cni/capture';
import type { Pod } from '@istio-cni/capture';
import { lineDiff, TESTDATA_ROOT } from './goldenCompare.ts';
import { recordedIptablesCommands } from './recordedIptablesCommands.ts';
import { PLUGIN_GOLDEN_CASES, type PluginCase } from './pluginGoldenCases.ts';

const DIR = `${TESTDATA_ROOT}/cni/pkg/plugin/testdata`;

const CASES = PLUGIN_GOLDEN_CASES;

function podFor(c: PluginCase): Pod {
  return {
    apiVersion: 'core/v1',
    kind: 'Pod',
    metadata: {
      name: 'testPod',
      namespace: 'testNS',
      annotations: { 'sidecar.istio.io/status': 'true', ...c.annotations },
    },
    spec: {
      containers: [
        { name: 'test' },
        {
          name: 'istio-proxy',
          env: c.env ?? [],
          securityContext: {
            ...(c.runAsUser === undefined ? {} : { runAsUser: c.runAsUser }),
            ...(c.runAsGroup === undefined ? {} : { runAsGroup: c.runAsGroup }),
          },
        },
        { name: 'istio-validate' },
      ],
    },
  };
}

/** Upstream's per-table parser (testdata/upstream/inputs.md §3.4): split on COMMIT, drop save lines, key by table. */
function parseTables(text: string): Map<string, string> {
  const tables = new Map<string, string>();
  for (const piece of text.split('COMMIT')) {
    const lines = piece
      .replace(/^\n+|\n+$/g, '')
      .split('\n')
      .filter((l) => l !== 'iptables-save' && l !== 'ip6tables-save');
    const first = lines[0];
    if (first?.startsWith('* ')) tables.set(first.slice(2), [...lines, 'COMMIT'].join('\n'));
  }
  return tables;
}

for (const c of CASES) {
  test(`[plugin] ${c.name} programs the rules in ${c.golden}.txt.golden`, () => {
    const pod = podFor(c);
    assert.deepEqual(sidecarDecision(pod), { redirect: true });
    const config = captureConfigFromRedirect(redirectFromPod(pod), { enableIPv6: false });
    const rules = buildSidecarIptablesRules(config);
    // The dry-run file: every recorded line followed by a newline.
    const dryRunFile = recordedIptablesCommands(rules, config.enableIPv6)
      .map((l) => `${l}\n`)
      .join('');
    const golden = readFileSync(`${DIR}/${c.golden}.txt.golden`, 'utf8');
    const got = parseTables(dryRunFile);
    assert.ok(got.size > 0, 'no tables produced');
    const want = parseTables(golden);
    const sorted = (m: Map<string, string>): string => JSON.stringify([...m].sort(([a], [b]) => a.localeCompare(b)));
    if (sorted(got) !== sorted(want)) {
      assert.fail(`table mismatch for ${c.golden}.txt.golden:\n${lineDiff(golden, renderIptablesRestore(rules.v4))}`);
    }
    assert.deepEqual(got, want);
    // Stronger than upstream's check: the v4 restore document is the golden byte for byte.
    assert.equal(renderIptablesRestore(rules.v4), golden);
  });
}
