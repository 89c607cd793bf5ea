/**
 * Burst (root, real kernel): 200 sidecar pods created at once on one node. Every
 * plugin ADD completes through the agent (no fallback to degraded mode), no xtables lock error
 * shows anywhere, every netns holds the capture rules, and the daemon's memory stays bounded.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { addPodNetns, type PodNetns } from '../support/addPodNetns.ts';
import type { ExecResult } from '../support/execPlugin.ts';
import { findLog } from '../support/pluginLogLines.ts';
import { namespaceObject, sidecarPod } from '../support/meshPods.ts';
import { CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { startAgentRig, type AgentRig } from '../support/startAgentRig.ts';
import { watchPeakRss } from '../support/watchPeakRss.ts';

const PODS = 200;
/** Generous: the daemon idles around 60–80 MiB; a leak per pod or an unbounded queue shows far above. */
const RSS_CEILING_KIB = 300 * 1024;
const LOCK_ERRORS = /xtables lock|Resource temporarily unavailable/i;

const variants: { name: string; env: Record<string, string> }[] = [
  { name: 'iptables backend as detected', env: {} },
  // Legacy xtables is the backend with a lock to contend for.
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' } },
  { name: 'native nftables', env: { NATIVE_NFTABLES: 'true' } },
];

for (const variant of variants)
  describe(`${PODS} simultaneous sidecar ADDs [${variant.name}]`, { skip: kernelSkip, timeout: 300_000 }, () => {
    let rig: AgentRig;
    const namespaces: PodNetns[] = [];

    before(async () => {
      rig = await startAgentRig(variant.env);
      rig.api.upsertNamespace(namespaceObject('burst'));
      for (let i = 0; i < PODS; i++) {
        rig.api.upsertPod(sidecarPod('burst', `burst-${i}`));
        namespaces.push(addPodNetns('burst', i));
      }
    });
    after(async () => {
      for (const ns of namespaces) ns.remove();
      await rig?.close();
    });

    it('all complete through the agent, without lock errors, with bounded daemon memory', async (t) => {
      const pid = rig.daemon.child.pid;
      assert.ok(pid !== undefined);
      const rss = watchPeakRss(pid);
      let results: ExecResult[];
      try {
        results = await Promise.all(
          namespaces.map((ns, i) =>
            rig.exec('ADD', sidecarPod('burst', `burst-${i}`), {
              netns: ns.path,
              containerId: `burst${i}`,
              address: ns.address,
              gateway: ns.gateway,
            }),
          ),
        );
      } finally {
        const { peakKiB, samples } = rss.stop();
        t.diagnostic(`daemon peak RSS ${Math.round(peakKiB / 1024)} MiB over ${samples} samples`);
        assert.ok(samples > 0, 'RSS sampled');
        assert.ok(peakKiB < RSS_CEILING_KIB, `daemon peak RSS ${Math.round(peakKiB / 1024)} MiB exceeds ${RSS_CEILING_KIB / 1024} MiB`);
      }

      const failures = results.flatMap((res, i) => (res.code === 0 ? [] : [`burst-${i}: exit ${res.code} ${res.stdout}`]));
      assert.deepEqual(failures, [], 'every ADD succeeded');
      const notByAgent = results.flatMap((res, i) =>
        findLog(res.stderr, 'pod handled by agent')?.verdict === 'redirected' ? [] : [`burst-${i}: ${res.stderr}`],
      );
      assert.deepEqual(notByAgent, [], 'every pod was redirected by the agent (no degraded fallback)');
      const lockErrors = [...results.flatMap((r) => [r.stdout, r.stderr]), ...rig.daemon.lines].filter((text) => LOCK_ERRORS.test(text));
      assert.deepEqual(lockErrors, [], 'no xtables lock error anywhere');

      const missing: string[] = [];
      for (const ns of namespaces) {
        if (!CAPTURE_CHAIN.test(await netnsRuleset(ns.path))) missing.push(ns.name);
      }
      assert.deepEqual(missing, [], 'every netns holds the capture rules');
    });
  });
