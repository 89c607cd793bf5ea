import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  ambientConfigFromOptions,
  buildAmbientHostIptablesRules,
  buildAmbientHostNftRules,
  buildAmbientPodIptablesRules,
  buildAmbientPodNftRules,
  DEFAULT_AMBIENT_POD_OVERRIDES,
  DEFAULT_HOST_PROBE_SNAT_IPV6,
  renderAmbientHostNftTransaction,
  renderAmbientPodNftTransaction,
} from '@istio-cni/capture';
import type { AmbientConfig, AmbientPodOverrides, IptablesRuleSet } from '@istio-cni/capture';
import { assertTrimmedGolden, TESTDATA_ROOT } from './goldenCompare.ts';
import { recordedIptablesCommands } from './recordedIptablesCommands.ts';

const IPTABLES_DIR = `${TESTDATA_ROOT}/cni/pkg/iptables/testdata`;
const NFTABLES_DIR = `${TESTDATA_ROOT}/cni/pkg/nftables/testdata`;

/** Upstream's test SNAT v6 address (testdata/upstream/inputs.md §4.1); only the iptables host case uses the real default. */
const TEST_V6_SNAT = 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164';
const KUBELET_UID = 1000;

type Backend = 'iptables' | 'nftables';

interface AmbientScenario {
  readonly name: string;
  readonly redirectDns: boolean;
  /** Absent for the host case, which calls the host entry point instead. */
  readonly pod?: AmbientPodOverrides;
}

const pod = (o: Partial<AmbientPodOverrides>): AmbientPodOverrides => ({ ...DEFAULT_AMBIENT_POD_OVERRIDES, ...o });
const VIRT = ['fake1s0f0', 'fake1s0f1'];

/** `cni/pkg/{iptables,nftables}/common_test.go` (testdata/upstream/inputs.md §4.2): one table drives both backends. */
const AMBIENT_SCENARIOS: readonly AmbientScenario[] = [
  { name: 'default', redirectDns: true, pod: pod({}) },
  { name: 'ingress', redirectDns: false, pod: pod({ ingressMode: true }) },
  { name: 'virtual_interfaces', redirectDns: false, pod: pod({ virtualInterfaces: VIRT }) },
  { name: 'ingress_and_virtual_interfaces', redirectDns: false, pod: pod({ ingressMode: true, virtualInterfaces: VIRT }) },
  { name: 'dns_pod_enabled_and_off_globally', redirectDns: false, pod: pod({ dnsCapture: 'enabled' }) },
  { name: 'dns_pod_disabled_and_on_globally', redirectDns: true, pod: pod({ dnsCapture: 'disabled' }) },
  { name: 'hostprobe', redirectDns: true },
];

function configFor(backend: Backend, scenario: AmbientScenario, enableIPv6: boolean): AmbientConfig {
  const hostIptables = backend === 'iptables' && scenario.pod === undefined;
  return ambientConfigFromOptions({
    enableIPv6,
    redirectDns: scenario.redirectDns,
    hostProbeSnatIp: '169.254.7.127',
    hostProbeSnatIpv6: hostIptables ? DEFAULT_HOST_PROBE_SNAT_IPV6 : TEST_V6_SNAT,
  });
}

/**
 * What upstream's recording stub captures (testdata/upstream/inputs.md §4.3): the sidecar framing (both save probes,
 * then each restore document's stdin lines) without its final save lines.
 */
function recordedLines(rules: IptablesRuleSet, enableIPv6: boolean): string {
  const lines = recordedIptablesCommands(rules, enableIPv6);
  return lines.slice(0, lines.length - (enableIPv6 ? 2 : 1)).join('\n');
}

function iptablesOutput(scenario: AmbientScenario, enableIPv6: boolean): string {
  const config = configFor('iptables', scenario, enableIPv6);
  const rules = scenario.pod === undefined ? buildAmbientHostIptablesRules(config) : buildAmbientPodIptablesRules(config, scenario.pod);
  return recordedLines(rules, enableIPv6);
}

function nftablesOutput(scenario: AmbientScenario, enableIPv6: boolean): string {
  const config = configFor('nftables', scenario, enableIPv6);
  return scenario.pod === undefined
    ? renderAmbientHostNftTransaction(buildAmbientHostNftRules(config, KUBELET_UID))
    : renderAmbientPodNftTransaction(buildAmbientPodNftRules(config, scenario.pod));
}

/**
 * Upstream compares trimmed text; ours is stricter and needs no normalisation: the recorded
 * lines join without a final newline like the iptables goldens, and nft scripts end with one
 * like the nftables goldens. The trimmed compare runs first for its line diff.
 */
function assertExactGolden(path: string, actual: string): void {
  assertTrimmedGolden(path, actual);
  assert.equal(actual, readFileSync(path, 'utf8'), `${path}: leading/trailing whitespace differs`);
}

const VARIANTS: ReadonlyArray<readonly [suffix: string, enableIPv6: boolean]> = [
  ['', false],
  ['_ipv6', true],
];

for (const scenario of AMBIENT_SCENARIOS) {
  for (const [suffix, enableIPv6] of VARIANTS) {
    const golden = `${scenario.name}${suffix}.golden`;
    test(`[ambient iptables] ${golden} matches the upstream golden`, () => {
      assertExactGolden(`${IPTABLES_DIR}/${golden}`, iptablesOutput(scenario, enableIPv6));
    });
    test(`[ambient nftables] ${golden} matches the upstream golden`, () => {
      assertExactGolden(`${NFTABLES_DIR}/${golden}`, nftablesOutput(scenario, enableIPv6));
    });
  }
}

test('the scenario table covers every ambient golden file (14 + 14)', () => {
  const expected = AMBIENT_SCENARIOS.flatMap((s) => VARIANTS.map(([suffix]) => `${s.name}${suffix}.golden`)).sort();
  assert.deepEqual(readdirSync(IPTABLES_DIR).sort(), expected);
  assert.deepEqual(readdirSync(NFTABLES_DIR).sort(), expected);
});

test('building twice gives the same output (upstream TestInvokedTwiceIsIdempotent)', () => {
  for (const scenario of AMBIENT_SCENARIOS) {
    assert.equal(iptablesOutput(scenario, false), iptablesOutput(scenario, false));
    assert.equal(nftablesOutput(scenario, false), nftablesOutput(scenario, false));
  }
});

test('the IPv4 document inside an _ipv6 golden equals the plain golden (inputs.md §4.3)', () => {
  for (const scenario of AMBIENT_SCENARIOS) {
    const v4 = iptablesOutput(scenario, false);
    assert.ok(iptablesOutput(scenario, true).startsWith(`${v4}\n`), scenario.name);
  }
});
