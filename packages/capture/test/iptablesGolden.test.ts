import { test } from 'node:test';
import { buildSidecarIptablesRules } from '@istio-cni/capture';
import { CAPTURE_SCENARIOS } from './captureScenarios.ts';
import { assertTrimmedGolden, TESTDATA_ROOT } from './goldenCompare.ts';
import { recordedIptablesCommands } from './recordedIptablesCommands.ts';

const DIR = `${TESTDATA_ROOT}/tools/istio-iptables/pkg/capture/testdata`;

for (const { name, config, nftOnly } of CAPTURE_SCENARIOS) {
  if (nftOnly) continue;
  test(`[iptables] ${name} matches the upstream golden`, () => {
    const lines = recordedIptablesCommands(buildSidecarIptablesRules(config), config.enableIPv6);
    assertTrimmedGolden(`${DIR}/${name}.golden`, lines.join('\n'));
  });
}
