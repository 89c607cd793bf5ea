/**
 * (root, real kernel) The ambient agent (`dist/install-cni` in a scratch node netns) behind a
 * fault-injecting proxy in front of the API: a 100-pod ambient burst while the proxy resets 10 %
 * of requests (half after the server acted), answers 5 % with 429 `Retry-After: 1` and 5 % with
 * 503, then a burst during an API server restart. Watch events are held back during each burst, so
 * the agent reads the new pods directly and the faults hit those reads as well as the annotation
 * patches. Every ADD ends 0 or 11 (never 999); after kubelet-style retries of the 11s every pod is
 * enrolled once: one net Add at ztunnel, the annotation, one probe-set entry, no duplicate rules.
 */
import { AMBIENT_BACKENDS, ambientSuite } from '../support/ambientSuite.ts';
import assert from 'node:assert/strict';
import { before, describe, it, type TestContext } from 'node:test';
import { ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { duplicates, iptablesRuleLines, nftRuleLines, probeSetEntries } from '../support/ambientNodeState.ts';
import { attachmentOf, type AmbientRig } from '../support/ambientRig.ts';
import type { FakeZtunnel } from '../support/fakeZtunnel.ts';
import { burstDiagnostic, burstWithKubeletRetries, faultsOn } from '../support/kubeletBurst.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';

const NS = 'amb-faults';
const PODS = 100;
const REDIRECTION = 'ambient.istio.io/redirection';

const backends = AMBIENT_BACKENDS;

for (const backend of backends)
  describe(`API faults under a 100-pod ambient burst [${backend.name}]`, { skip: kernelSkip, timeout: 600_000 }, () => {
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const sandboxes = new Map<string, PodSandbox>();
    let nextIndex = 0;

    const suite = ambientSuite(NS, backend, sandboxes, { viaFaultProxy: true });
    before(() => ({ node, rig, ztunnel } = suite()));

    /**
     * Creates PODS sandboxes (not timed), then with watch events held back registers each pod in the
     * API and ADDs it at once, runs `during` alongside, and retries the 11s like kubelet does.
     */
    async function burst(t: TestContext, during?: () => Promise<void>): Promise<void> {
      const proxy = rig.proxy!;
      const round: PodSandbox[] = [];
      for (let i = 0; i < PODS; i++) {
        const index = nextIndex++;
        // No pause process: the CNI path hands the netns over by path.
        const s = await node.addPod(NS, `app-${index}`, index, { pause: false });
        sandboxes.set(s.uid, s);
        round.push(s);
      }
      const add = (s: PodSandbox) => rig.exec('ADD', rig.api.getPod(NS, s.name)!, attachmentOf(s));
      const before = structuredClone(proxy.counts);
      const result = await burstWithKubeletRetries({
        proxy,
        names: round.map((s) => s.name),
        register: (i) => rig.api.upsertPod(ambientPodObject(round[i]!)),
        add: (i) => add(round[i]!),
        outcome: 'enrolled',
        during,
      }).catch((err: unknown) => {
        // Why the agent kept refusing is in its own log, not in the plugin's answer alone.
        const refusals = rig.daemon.lines.filter((l) => /"level":"(warn|error)"/.test(l));
        t.diagnostic(`the agent's last warnings and errors:\n${refusals.slice(-30).join('\n')}`);
        throw err;
      });
      for (const s of round) {
        assert.equal(rig.api.getPod(NS, s.name)?.metadata.annotations?.[REDIRECTION], 'enabled', `${s.name} annotated`);
        const adds = ztunnel.log.filter((l) => l === `add:${s.uid}`).length;
        const dels = ztunnel.log.filter((l) => l === `del:${s.uid}`).length;
        assert.equal(adds - dels, 1, `${s.name}: one net Add at ztunnel (${adds} adds, ${dels} dels)`);
        assert.ok(ztunnel.known.has(s.uid), `ztunnel knows ${s.name}`);
      }
      const entries = await probeSetEntries(node.netns.path, backend.sets);
      // Every pod so far, not only this round's: a burst must not cost an earlier pod its enrolment.
      const lost = [...sandboxes.values()].filter(
        (s) =>
          entries
            .filter((e) => e.uid === s.uid)
            .map((e) => e.ip)
            .join() !== s.ip || !ztunnel.known.has(s.uid),
      );
      if (lost.length > 0) {
        const names = new Set(lost.map((s) => `"pod":"${NS}/${s.name}"`));
        const lines = rig.daemon.lines.filter((l) => [...names].some((n) => l.includes(n)));
        t.diagnostic(`the agent's lines for those pods:\n${lines.slice(-60).join('\n')}`);
      }
      assert.deepEqual(
        lost.map(
          (s) =>
            `${s.name}: probe set ${JSON.stringify(entries.filter((e) => e.uid === s.uid).map((e) => e.ip))}, ztunnel ${ztunnel.known.has(s.uid)}`,
        ),
        [],
        'every pod so far has one probe-set entry (its IP) and is known to ztunnel',
      );
      assert.equal(entries.length, sandboxes.size, 'no probe-set entry beyond the enrolled pods');
      for (const s of round) {
        assert.deepEqual(duplicates(await iptablesRuleLines(s.netns.path)), [], `no duplicate iptables rules in ${s.name}`);
        assert.deepEqual(duplicates(nftRuleLines(await netnsRuleset(s.netns.path))), [], `no duplicate nft rules in ${s.name}`);
      }
      assert.deepEqual(ztunnel.fdProblems, []);

      t.diagnostic(burstDiagnostic(before, proxy.counts, result, ['GET', 'PATCH']));
    }

    it('10 % resets, 5 % 429 with Retry-After, 5 % 503: every ADD ends 0 or 11, then every pod enrolled once', async (t) => {
      const proxy = rig.proxy!;
      const before = structuredClone(proxy.counts);
      proxy.setRates({ reset: 0.05, resetAfterForward: 0.05, tooMany: 0.05, unavailable: 0.05 });
      try {
        await burst(t);
      } finally {
        proxy.setRates({});
      }
      assert.ok(
        faultsOn(proxy.counts, 'PATCH') > faultsOn(before, 'PATCH'),
        `faults hit the annotation patches: ${JSON.stringify(proxy.counts)}`,
      );
      assert.ok(
        faultsOn(proxy.counts, 'GET') > faultsOn(before, 'GET'),
        `faults hit the direct pod reads: ${JSON.stringify(proxy.counts)}`,
      );
    });

    it('the API server restarts mid-burst: every ADD ends 0 or 11, then every pod enrolled once', async (t) => {
      const restarts = rig.proxy!.counts.restarts;
      await burst(t, async () => {
        await rig.proxy!.whenRequests('PATCH', 20, 60_000);
        await rig.proxy!.restart(1500);
      });
      assert.equal(rig.proxy!.counts.restarts, restarts + 1);
    });
  });
