/**
 * (root, real kernel) The ambient agent (`dist/install-cni` in a scratch node netns) behind a
 * fault-injecting proxy in front of the API: a 100-pod ambient burst while the proxy resets 10 %
 * of requests (half after the server acted), answers 5 % with 429 `Retry-After: 1` and 5 % with
 * 503, then a burst during an API server restart. Watch events are held back during each burst, so
 * the agent reads the new pods directly and the faults hit those reads as well as the annotation
 * patches. Every ADD ends 0 or 11 (never 999); after kubelet-style retries of the 11s every pod is
 * enrolled once: one net Add at ztunnel, the annotation, one probe-set entry, no duplicate rules.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { ambientPodObject, createAmbientNode, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { duplicates, iptablesRuleLines, nftRuleLines, probeSetEntries } from '../support/ambientNodeState.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import type { ExecResult } from '../support/execPlugin.ts';
import type { FaultCounts } from '../support/faultProxy.ts';
import { startFakeKubelet, type FakeKubelet } from '../support/fakeKubelet.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from '../support/meshPods.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { notRootSkip } from '../support/podNetworkFixture.ts';

const NS = 'amb-faults';
const PODS = 100;
const TRY_AGAIN = 11;
const KUBELET_RETRIES = 10;
const REDIRECTION = 'ambient.istio.io/redirection';

const backends = [
  { name: 'iptables', env: {}, sets: 'ipset' },
  { name: 'nftables', env: { NATIVE_NFTABLES: 'true' }, sets: 'nft' },
] as const;

/** The CNI error code on stdout of a failed ADD (0 for success, -1 for no CNI error document). */
function cniCode(res: ExecResult): number {
  if (res.code === 0) return 0;
  try {
    return (JSON.parse(res.stdout) as { code?: number }).code ?? -1;
  } catch {
    return -1;
  }
}

const faultsOn = (c: FaultCounts, method: string) => c.faultsByMethod[method] ?? 0;

for (const backend of backends)
  describe(`API faults under a 100-pod ambient burst [${backend.name}]`, { skip: notRootSkip, timeout: 600_000 }, () => {
    let kubelet: FakeKubelet | undefined;
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const sandboxes = new Map<string, PodSandbox>();
    let nextIndex = 0;

    before(async () => {
      if (backend.name === 'nftables') kubelet = await startFakeKubelet(4242);
      node = createAmbientNode();
      rig = await startAmbientRig(node.netns.path, backend.env, { viaFaultProxy: true });
      await rig.startDaemon();
      rig.api.upsertNamespace(namespaceObject(NS, { [AMBIENT_LABEL]: 'ambient' }));
      ztunnel = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => sandboxes.get(uid)?.netns.path });
      await ztunnel.waitFor(() => ztunnel.snapshots[0] === 1, 'the first snapshot');
    });
    after(async () => {
      ztunnel?.close();
      await rig?.close();
      await node?.remove();
      await kubelet?.stop();
    });

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
      proxy.holdWatches(true);
      let results: ExecResult[];
      try {
        [results] = await Promise.all([
          Promise.all(
            round.map((s) => {
              rig.api.upsertPod(ambientPodObject(s));
              return add(s);
            }),
          ),
          during?.(),
        ]);
      } finally {
        proxy.holdWatches(false);
      }
      const first = results.map(cniCode);
      const bad = results.flatMap((r, i) =>
        first[i] === 0 || first[i] === TRY_AGAIN ? [] : [`${round[i]!.name}: exit ${r.code} ${r.stdout} ${r.stderr.slice(-400)}`],
      );
      assert.deepEqual(bad, [], 'every ADD ends 0 or 11');
      let retried = 0;
      for (const [i, s] of round.entries()) {
        let code = first[i];
        for (let n = 0; code === TRY_AGAIN && n < KUBELET_RETRIES; n++) {
          retried++;
          await new Promise((r) => setTimeout(r, 200));
          const res = await add(s);
          code = cniCode(res);
          assert.ok(code === 0 || code === TRY_AGAIN, `retry of ${s.name}: ${res.stdout}`);
        }
        assert.equal(code, 0, `${s.name} enrolled after kubelet-style retries`);
      }

      for (const s of round) {
        assert.equal(rig.api.getPod(NS, s.name)?.metadata.annotations?.[REDIRECTION], 'enabled', `${s.name} annotated`);
        const adds = ztunnel.log.filter((l) => l === `add:${s.uid}`).length;
        const dels = ztunnel.log.filter((l) => l === `del:${s.uid}`).length;
        assert.equal(adds - dels, 1, `${s.name}: one net Add at ztunnel (${adds} adds, ${dels} dels)`);
        assert.ok(ztunnel.known.has(s.uid), `ztunnel knows ${s.name}`);
      }
      const entries = await probeSetEntries(node.netns.path, backend.sets);
      for (const s of round) {
        const own = entries.filter((e) => e.uid === s.uid);
        assert.deepEqual(
          own.map((e) => e.ip),
          [s.ip],
          `one probe-set entry for ${s.name}`,
        );
      }
      assert.equal(entries.length, sandboxes.size, 'no probe-set entry beyond the enrolled pods');
      for (const s of round) {
        assert.deepEqual(duplicates(await iptablesRuleLines(s.netns.path)), [], `no duplicate iptables rules in ${s.name}`);
        assert.deepEqual(duplicates(nftRuleLines(await netnsRuleset(s.netns.path))), [], `no duplicate nft rules in ${s.name}`);
      }
      assert.deepEqual(ztunnel.fdProblems, []);

      const c = proxy.counts;
      const delta = (k: 'reset' | 'resetAfterForward' | 'tooMany' | 'unavailable' | 'restarts') => c[k] - before[k];
      const byMethod = (m: string) => `${faultsOn(c, m) - faultsOn(before, m)}/${(c.byMethod[m] ?? 0) - (before.byMethod[m] ?? 0)}`;
      t.diagnostic(
        `first answers: ${first.filter((x) => x === 0).length} ok, ${first.filter((x) => x === TRY_AGAIN).length} try-again; ${retried} retries; ` +
          `faults: ${delta('reset')} reset, ${delta('resetAfterForward')} reset after forward, ${delta('tooMany')} 429, ${delta('unavailable')} 503, ${delta('restarts')} restarts; ` +
          `faulted/requests GET ${byMethod('GET')}, PATCH ${byMethod('PATCH')}`,
      );
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
