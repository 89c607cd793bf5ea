// `make down`: removes everything `make up` created (processes, sandboxes, netns, links, cgroups,
// mounts, kubelet's sysctls, .cluster/), from the record `make up` keeps in .cluster/state.json.
import { releaseHost } from '../support/hostClaim.ts';
import { CLUSTER_DIR, HOST_CLAIM_FILE } from './layout.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';

const started = Date.now();
const state = loadState();
if (state === undefined) {
  console.log(`no cluster: ${CLUSTER_DIR}/state.json does not exist`);
  releaseHost(HOST_CLAIM_FILE, CLUSTER_DIR);
} else {
  const problems = await tearDown(state);
  if (problems.length > 0) {
    console.error(`make down left behind (${CLUSTER_DIR} kept):\n  ${problems.join('\n  ')}`);
    process.exitCode = 1;
  } else {
    console.log(`cluster removed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
}
