import { test } from 'node:test';
import { buildSidecarNftRules, renderNftTransaction } from '@istio-cni/capture';
import { CAPTURE_SCENARIOS } from './captureScenarios.ts';
import { assertTrimmedGolden, TESTDATA_ROOT } from './goldenCompare.ts';

const DIR = `${TESTDATA_ROOT}/tools/istio-nftables/pkg/capture/testdata`;

for (const { name, config } of CAPTURE_SCENARIOS) {
  test(`[nftables] ${name} matches the upstream golden`, () => {
    assertTrimmedGolden(`${DIR}/${name}.golden`, renderNftTransaction(buildSidecarNftRules(config)));
  });
}
