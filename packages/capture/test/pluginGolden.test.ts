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
import type { EnvVar, Pod } from '@istio-cni/capture';
import { lineDiff, TESTDATA_ROOT } from './goldenCompare.ts';
import { recordedIptablesCommands } from './recordedIptablesCommands.ts';

const DIR = `${TESTDATA_ROOT}/cni/pkg/plugin/testdata`;

interface PluginCase {
  readonly name: string;
  readonly golden: string;
  readonly annotations?: Record<string, string>;
  readonly env?: EnvVar[];
  readonly runAsUser?: number;
  readonly runAsGroup?: number;
}

/** `plugin_dryrun_test.go` cases (CASES.md 3.2); status-ports.txt.golden is stale and unused. */
const CASES: readonly PluginCase[] = [
  { name: 'basic', golden: 'basic' },
  {
    name: 'include-exclude-ip', golden: 'include-exclude-ip',
    annotations: {
      'traffic.sidecar.istio.io/includeOutboundIPRanges': '127.0.0.0/8',
      'traffic.sidecar.istio.io/excludeOutboundIPRanges': '10.0.0.0/8',
    },
  },
  {
    name: 'include-exclude-ports', golden: 'include-exclude-ports',
    annotations: {
      'traffic.sidecar.istio.io/includeInboundPorts': '1111,2222',
      'traffic.sidecar.istio.io/excludeInboundPorts': '3333,4444',
      'traffic.sidecar.istio.io/excludeOutboundPorts': '5555,6666',
    },
  },
  { name: 'tproxy', golden: 'tproxy', annotations: { 'sidecar.istio.io/interceptionMode': 'TPROXY' } },
  { name: 'DNS', golden: 'dns', env: [{ name: 'ISTIO_META_DNS_CAPTURE', value: 'true' }] },
  { name: 'invalid-drop', golden: 'invalid-drop', env: [{ name: 'INVALID_DROP', value: 'true' }] },
  { name: 'custom-uid', golden: 'custom-uid', runAsUser: 1000670000, runAsGroup: 1000670001 },
  { name: 'custom-uid-zero', golden: 'basic', runAsUser: 0 },
  {
    name: 'custom-uid-tproxy', golden: 'custom-uid-tproxy',
    annotations: { 'sidecar.istio.io/interceptionMode': 'TPROXY' }, runAsUser: 1000670000, runAsGroup: 1000670001,
  },
];

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

/** Upstream's per-table parser (CASES.md 3.4): split on COMMIT, drop save lines, key by table. */
function parseTables(text: string): Map<string, string> {
  const tables = new Map<string, string>();
  for (const piece of text.split('COMMIT')) {
    const lines = piece.replace(/^\n+|\n+$/g, '').split('\n')
      .filter((l) => l !== 'iptables-save' && l !== 'ip6tables-save');
    const first = lines[0];
    if (first !== undefined && first.startsWith('* ')) tables.set(first.slice(2), [...lines, 'COMMIT'].join('\n'));
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
    const dryRunFile = recordedIptablesCommands(rules, config.enableIPv6).map((l) => `${l}\n`).join('');
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
