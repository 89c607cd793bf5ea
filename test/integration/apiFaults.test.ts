/**
 * (root, real kernel) The daemon and the plugin behind a fault-injecting proxy in front of the
 * API: idle connections closed by the server at the moment of reuse, a 100-pod sidecar burst
 * while the proxy resets 10 % of requests (half after the server acted), answers 5 % with 429
 * `Retry-After: 1` and 5 % with 503, an API server restart mid-burst, and the plugin's degraded
 * mode (agent down) reading pods through the same faults. Watch events are held back during each
 * burst, so the pods are not in the daemon's cache and it reads each one directly: the faults hit
 * those reads. Every ADD ends 0 or 11 (never 999); after kubelet-style retries of the 11s every
 * pod is captured, once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { addPodNetns, type PodNetns } from '../support/addPodNetns.ts';
import { duplicates, iptablesRuleLines, nftRuleLines } from '../support/ambientNodeState.ts';
import { namespaceObject, sidecarPod } from '../support/meshPods.ts';
import { CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import type { FaultCounts } from '../support/faultProxy.ts';
import { burstDiagnostic, burstWithKubeletRetries, faultsOn } from '../support/kubeletBurst.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { startAgentRig, type AgentRig } from '../support/startAgentRig.ts';

const PODS = 100;

const variants: { name: string; env: Record<string, string> }[] = [
  { name: 'iptables-nft', env: { FORCE_IPTABLES_BINARY: 'nft' } },
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' } },
  { name: 'native nftables', env: { NATIVE_NFTABLES: 'true' } },
];

const injected = (c: FaultCounts) => c.reset + c.resetAfterForward + c.tooMany + c.unavailable + c.closedOnReuse;

for (const variant of variants)
  describe(`API faults under a sidecar burst [${variant.name}]`, { skip: kernelSkip, timeout: 300_000 }, () => {
    let rig: AgentRig;
    const created: PodNetns[] = [];
    let round = 0;

    before(async () => {
      rig = await startAgentRig(variant.env, { viaFaultProxy: true });
      rig.api.upsertNamespace(namespaceObject('faults'));
    });
    after(async () => {
      for (const ns of created) ns.remove();
      await rig?.close();
    });

    /**
     * ADDs every pod at once, each created in the API as its ADD starts while watch events are held
     * back (so the daemon has not seen them and reads each one directly), then retries the 11s like
     * kubelet does.
     */
    async function burst(t: TestContext, during?: () => Promise<void>): Promise<{ first: number[]; retried: number }> {
      round++;
      const proxy = rig.proxy!;
      const before = structuredClone(proxy.counts);
      // Fresh netns each round, so the rules found afterwards are this round's.
      const namespaces = Array.from({ length: PODS }, (_, i) => addPodNetns(`faults${round}`, i));
      created.push(...namespaces);
      const pods = namespaces.map((_, i) => sidecarPod('faults', `r${round}-${i}`));
      const add = (i: number) => {
        const ns = namespaces[i] as PodNetns;
        return rig.exec('ADD', pods[i]!, { netns: ns.path, containerId: `r${round}c${i}`, address: ns.address, gateway: ns.gateway });
      };
      const result = await burstWithKubeletRetries({
        proxy,
        names: pods.map((p) => p.metadata.name),
        register: (i) => rig.api.upsertPod(pods[i]!),
        add,
        outcome: 'captured',
        during,
      });
      for (const ns of namespaces) {
        const rules = await netnsRuleset(ns.path);
        assert.match(rules, CAPTURE_CHAIN, `${ns.name} holds the capture rules`);
        assert.deepEqual(duplicates(await iptablesRuleLines(ns.path)), [], `no duplicate rules in ${ns.name}`);
        assert.deepEqual(duplicates(nftRuleLines(rules)), [], `no duplicate nft rules in ${ns.name}`);
      }
      t.diagnostic(burstDiagnostic(before, proxy.counts, result, ['GET']));
      return result;
    }

    it('idle connections closed by the server at the moment of reuse: every ADD succeeds at once', async (t) => {
      const closed = rig.proxy!.counts.closedOnReuse;
      rig.proxy!.closeIdleOnReuse(true);
      try {
        // A machine slow enough that no pooled socket is reused within the client's idle limit
        // exercises nothing: burst again (at most three times) until some connection was reused.
        for (let attempt = 1; attempt <= 3 && rig.proxy!.counts.closedOnReuse === closed; attempt++) {
          const { first } = await burst(t);
          assert.deepEqual(
            first.filter((c) => c !== 0),
            [],
            'no ADD needed a retry',
          );
        }
      } finally {
        rig.proxy!.closeIdleOnReuse(false);
      }
      assert.ok(rig.proxy!.counts.closedOnReuse > closed, 'connections were closed on reuse');
    });

    it('10 % resets, 5 % 429 with Retry-After, 5 % 503: every ADD ends 0 or 11, then all captured once', async (t) => {
      const before = structuredClone(rig.proxy!.counts);
      rig.proxy!.setRates({ reset: 0.05, resetAfterForward: 0.05, tooMany: 0.05, unavailable: 0.05 });
      try {
        await burst(t);
      } finally {
        rig.proxy!.setRates({});
      }
      const c = rig.proxy!.counts;
      assert.ok(injected(c) > injected(before), 'faults were injected');
      assert.ok(faultsOn(c, 'GET') > faultsOn(before, 'GET'), `faults hit the daemon's direct pod reads: ${JSON.stringify(c)}`);
    });

    it('the API server restarts mid-burst: every ADD ends 0 or 11, then all captured once', async (t) => {
      const restarts = rig.proxy!.counts.restarts;
      await burst(t, async () => {
        await rig.proxy!.whenRequests('GET', 20, 60_000);
        await rig.proxy!.restart(1500);
      });
      assert.equal(rig.proxy!.counts.restarts, restarts + 1);
    });

    it('degraded mode (agent down) reads pods through the same faults: every ADD ends 0 or 11, then all captured once', async (t) => {
      await rig.daemon.stop('SIGKILL');
      const before = structuredClone(rig.proxy!.counts);
      rig.proxy!.setRates({ reset: 0.05, resetAfterForward: 0.05, tooMany: 0.05, unavailable: 0.05 });
      try {
        await burst(t);
      } finally {
        rig.proxy!.setRates({});
      }
      const c = rig.proxy!.counts;
      assert.ok(faultsOn(c, 'GET') > faultsOn(before, 'GET'), `faults hit the plugin's pod reads: ${JSON.stringify(c)}`);
    });
  });
