/**
 * `make bench`: every figure is a ratio against a baseline measured in the same run, or an
 * absolute count (bytes, RSS). RUNS (default 30) sets the samples per scenario.
 */
import { benchAmbient } from './ambient.ts';
import { benchApplySidecarRules } from './applySidecarRules.ts';
import { benchInstaller } from './installer.ts';
import { benchPluginStartup } from './pluginStartup.ts';
import { benchSidecarAdd } from './sidecarAdd.ts';
import { benchUpstreamPeer } from './upstreamPeer.ts';

const runs = Number.parseInt(process.env.RUNS ?? '30', 10);
console.log(`# istio-cni benchmarks (Node ${process.version}, ${runs} runs per scenario, ${new Date().toISOString()})`);

await benchPluginStartup(runs);

if (process.getuid?.() === 0) {
  const samples = await benchApplySidecarRules(runs);
  console.log('\n## Default sidecar rule set applied into a fresh netns (vs bare `nsenter --net=<netns> true`)\n');
  console.log('| backend | runs | apply median ms | nsenter median ms | ratio |');
  console.log('|---|---:|---:|---:|---:|');
  for (const s of samples) {
    console.log(`| ${s.backend} | ${s.runs} | ${s.applyMedianMs.toFixed(1)} | ${s.nsenterMedianMs.toFixed(1)} | ${s.ratio.toFixed(2)} |`);
  }
  await benchSidecarAdd(runs);
  await benchAmbient(runs);
  // PEER=0 leaves out the side-by-side run (it needs the e2e rig and upstream's build).
  if (process.env.PEER !== '0') {
    await benchUpstreamPeer({ runs, starts: Number.parseInt(process.env.PEER_STARTS ?? '10', 10), pods: Number.parseInt(process.env.PEER_PODS ?? '420', 10) });
  }
} else {
  console.log('\n(skipping netns benchmarks: not root)');
}

const installer = await benchInstaller({ rewrites: 100 });
console.log('\n## Installer: re-insert after the primary conflist is rewritten without our entry\n');
console.log(`rewrites ${installer.rewrites}: median ${installer.reinsertMedianMs.toFixed(1)} ms, p99 ${installer.reinsertP99Ms.toFixed(1)} ms`);
console.log(`a pass over an unchanged node wrote ${installer.unchangedPassBytes} bytes to ${installer.unchangedPassFiles} files`);
