/**
 * `make bench`: every figure is a ratio against a baseline measured in the same run, or an
 * absolute count (bytes, RSS). RUNS (default 30) sets the samples per scenario. Every step is
 * bounded in time and fails with a message naming it instead of hanging.
 */
import { benchAmbient } from './ambient.ts';
import { benchApplySidecarRules } from './applySidecarRules.ts';
import { benchDaemonCodeCache } from './daemonCodeCache.ts';
import { benchImageSizes, printImageSizes } from './imageSize.ts';
import { benchInstaller } from './installer.ts';
import { bounded } from './measure.ts';
import { benchPluginStartup } from './pluginStartup.ts';
import { benchRobustness } from './robustness.ts';
import { benchSidecarAdd } from './sidecarAdd.ts';
import { benchTenantFlood, printTenantFlood } from './tenantFlood.ts';
import { benchUpstreamPeer } from './upstreamPeer.ts';
import { benchVerifyAmbientPass } from './verifyAmbientPass.ts';
import { benchVerifyCost, printVerifyCost } from './verifyCost.ts';
import { benchVerifyPass, printVerifyPass } from './verifyPass.ts';

const runs = Number.parseInt(process.env.RUNS ?? '30', 10);
const MINUTE = 60_000;
console.log(`# istio-cni benchmarks (Node ${process.version}, ${runs} runs per scenario, ${new Date().toISOString()})`);

await bounded('bench: plugin start-up', 10 * MINUTE, () => benchPluginStartup(runs));
await bounded('bench: daemon start-up by code cache', 10 * MINUTE, () => benchDaemonCodeCache(Math.min(runs, 20)));

if (process.getuid?.() === 0) {
  const samples = await bounded('bench: sidecar rules applied into a fresh netns', 10 * MINUTE, () => benchApplySidecarRules(runs));
  console.log('\n## Default sidecar rule set applied into a fresh netns (vs bare `nsenter --net=<netns> true`)\n');
  console.log('| backend | runs | apply median ms | nsenter median ms | ratio |');
  console.log('|---|---:|---:|---:|---:|');
  for (const s of samples) {
    console.log(`| ${s.backend} | ${s.runs} | ${s.applyMedianMs.toFixed(1)} | ${s.nsenterMedianMs.toFixed(1)} | ${s.ratio.toFixed(2)} |`);
  }
  printVerifyPass('sidecar', await bounded('bench: continuous verification pass', 10 * MINUTE, () => benchVerifyPass(110, 5)));
  printVerifyPass(
    'ambient',
    await bounded('bench: continuous verification pass, ambient', 10 * MINUTE, () => benchVerifyAmbientPass(110, 5)),
  );
  printTenantFlood(await bounded('bench: a tenant floods its pod netns', 15 * MINUTE, () => benchTenantFlood(100_000, 3)));
  await bounded('bench: end-to-end sidecar ADD', 10 * MINUTE, () => benchSidecarAdd(runs));
  await bounded('bench: ambient enrolment', 15 * MINUTE, () => benchAmbient(runs));
  await bounded('bench: robustness under API faults', 15 * MINUTE, () => benchRobustness());
  // VERIFY_COST=0 leaves out the 10 minutes of the running agents with and without verification.
  if (process.env.VERIFY_COST !== '0') {
    const cost = { pods: 110, durationS: 600, sampleS: 60 };
    const byMode = await bounded('bench: the agent with continuous verification', 30 * MINUTE, () =>
      Promise.all([benchVerifyCost('sidecar', cost), benchVerifyCost('ambient', cost)]),
    );
    for (const runs of byMode) printVerifyCost(runs, cost.sampleS);
  }
  // PEER=0 leaves out the side-by-side run (it needs the e2e rig and upstream's build).
  if (process.env.PEER !== '0') {
    const peer = {
      runs,
      starts: Number.parseInt(process.env.PEER_STARTS ?? '10', 10),
      pods: Number.parseInt(process.env.PEER_PODS ?? '420', 10),
    };
    await bounded('bench: side by side with upstream', 30 * MINUTE, () => benchUpstreamPeer(peer));
  }
  printImageSizes(await bounded('bench: image sizes', 5 * MINUTE, async () => benchImageSizes()));
} else {
  console.log('\n(skipping netns benchmarks: not root)');
}

const installer = await bounded('bench: installer re-insert', 5 * MINUTE, () => benchInstaller({ rewrites: 100 }));
console.log('\n## Installer: re-insert after the primary conflist is rewritten without our entry\n');
console.log(
  `rewrites ${installer.rewrites}: median ${installer.reinsertMedianMs.toFixed(1)} ms, p99 ${installer.reinsertP99Ms.toFixed(1)} ms`,
);
console.log(`a pass over an unchanged node wrote ${installer.unchangedPassBytes} bytes to ${installer.unchangedPassFiles} files`);

// Everything was closed above, so the process ends by itself. If something still holds the event
// loop open after a grace period, it is named here and the run exits instead of hanging.
setTimeout(() => {
  console.error(`bench: finished, but still holding ${process.getActiveResourcesInfo().join(', ')}; exiting`);
  process.exit(process.exitCode ?? 0);
}, 5_000).unref();
