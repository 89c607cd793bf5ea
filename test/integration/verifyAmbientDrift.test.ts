/**
 * Continuous verification of ambient pods (root, real kernel): `dist/install-cni` with ambient on
 * and a 1 s VERIFY_INTERVAL in a scratch node netns, a pod with a real pause process enrolled
 * through the built plugin, a fake ztunnel. Drift injected by hand (in-pod rules removed, the pod's
 * IP deleted from the host probe set, ztunnel refusing the pod in a reconnect snapshot; on the node,
 * the host probe rules flushed, removed by a firewalld-style reload, or given an extra rule) is
 * repaired once each, counted in `istio_cni_drift_total` and logged naming the pod (or the node state).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { ambientPodObject, type PodSandbox } from '../support/ambientNode.ts';
import { probeSetEntries } from '../support/ambientNodeState.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { inNetns, startVerifyingAmbient, until, type VerifyingAmbient } from '../support/verifyingAmbient.ts';

const NS = 'amb-verify';

const iptablesBackend = {
  sets: 'ipset' as const,
  // The agent's backend was detected in the node netns; the jump is removed with whichever holds
  // it (touching the other would load an empty table there and change the dump).
  removeRules: (netns: string) => {
    const holder = ['iptables-nft', 'iptables-legacy'].find((bin) =>
      execFileSync('nsenter', [`--net=${netns}`, '--', `${bin}-save`, '-t', 'nat'], { encoding: 'utf8' }).includes(
        '-A OUTPUT -j ISTIO_OUTPUT',
      ),
    );
    return holder !== undefined && inNetns(netns, [holder, '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT']);
  },
  removeProbe: (node: string, ip: string) => inNetns(node, ['ipset', 'del', 'istio-inpod-probes-v4', ip]),
  host: {
    flush: (node: string) => inNetns(node, [hostHolder(node), '-t', 'nat', '-F']),
    // firewalld's reload with its iptables backend: every chain flushed, every user chain deleted.
    reload: (node: string) => {
      const holder = hostHolder(node);
      return inNetns(node, [holder, '-t', 'nat', '-F']) && inNetns(node, [holder, '-t', 'nat', '-X']);
    },
    extra: (node: string) => inNetns(node, [hostHolder(node), '-t', 'nat', '-A', 'POSTROUTING', '-j', 'ISTIO_POSTRT']),
  },
};

/**
 * A rule dump with the blocks inside each nft table (chains, sets) in sorted order: a chain deleted
 * and re-added is listed after the others by `nft list ruleset`, the same rules all the same.
 */
function chainsSorted(dump: string): string {
  const out: string[] = [];
  let blocks: string[] | undefined;
  let current: string[] | undefined;
  for (const line of dump.split('\n')) {
    if (current !== undefined) {
      current.push(line);
      if (line === '\t}') {
        blocks?.push(current.join('\n'));
        current = undefined;
      }
    } else if (blocks !== undefined && /^\t\S.* \{$/.test(line)) current = [line];
    else if (blocks !== undefined && line === '}') {
      out.push(...blocks.sort(), line);
      blocks = undefined;
    } else {
      out.push(line);
      if (/^table .* \{$/.test(line)) blocks = [];
    }
  }
  return out.join('\n');
}

/** The xtables backend holding the host probe jump in the node netns (the agent's decision there). */
function hostHolder(node: string): string {
  const holder = ['iptables-nft', 'iptables-legacy'].find((bin) =>
    execFileSync('nsenter', [`--net=${node}`, '--', `${bin}-save`, '-t', 'nat'], { encoding: 'utf8' }).includes('-j ISTIO_POSTRT'),
  );
  if (holder === undefined) throw new Error('no backend holds the host probe jump');
  return holder;
}

const backends = [
  { name: 'iptables', env: {}, ...iptablesBackend },
  // Unchanged pods are skipped by the legacy tables' fingerprint there: the removal must still be seen.
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' }, ...iptablesBackend },
  {
    name: 'nftables',
    env: { NATIVE_NFTABLES: 'true' },
    sets: 'nft' as const,
    removeRules: (netns: string) => inNetns(netns, ['nft', 'delete', 'table', 'inet', 'istio-ambient-nat']),
    removeProbe: (node: string, ip: string) =>
      inNetns(node, ['nft', 'delete', 'element', 'inet', 'istio-ambient-nat', 'istio-inpod-probes-v4', `{ ${ip} }`]),
    host: {
      flush: (node: string) => inNetns(node, ['nft', 'flush', 'chain', 'inet', 'istio-ambient-nat', 'postrouting']),
      // firewalld's reload with its nftables backend where it owns the ruleset: everything gone, probe sets too.
      reload: (node: string) => inNetns(node, ['nft', 'flush', 'ruleset']),
      extra: (node: string) =>
        inNetns(node, ['nft', 'add', 'rule', 'inet', 'istio-ambient-nat', 'postrouting', 'ip', 'daddr', '192.0.2.1', 'accept']),
    },
  },
];

for (const backend of backends)
  describe(`[ambient ${backend.name}] continuous verification repairs drift`, { skip: kernelSkip, timeout: 240_000 }, () => {
    let v: VerifyingAmbient;
    let node: VerifyingAmbient['node'];
    let rig: VerifyingAmbient['rig'];
    let ztunnel: VerifyingAmbient['ztunnel'];
    let pod: PodSandbox;
    let stale: PodSandbox | undefined;

    const metric = (kind: string, action: string): Promise<number> => v.driftCount(kind, action);
    const repairedLine = (kind: string) => v.driftLine(`${NS}/${pod.name}`, kind);

    before(async () => {
      v = await startVerifyingAmbient(NS, backend.env, backend.name === 'nftables');
      ({ node, rig, ztunnel, pod } = v);
    });
    after(async () => {
      await v?.close();
    });

    it('removed in-pod rules are put back (rules_missing, repaired)', async () => {
      const programmed = await netnsRuleset(pod.netns.path);
      assert.ok(backend.removeRules(pod.netns.path), 'drift injected');
      const line = await repairedLine('rules_missing');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      assert.equal(await netnsRuleset(pod.netns.path), programmed);
      assert.equal(await metric('rules_missing', 'repaired'), 1);
    });

    it("a pod IP deleted from the host probe set is re-added with the pod's UID (probe_set, repaired)", async () => {
      assert.ok(backend.removeProbe(node.netns.path, pod.ip), 'drift injected');
      assert.deepEqual(await probeSetEntries(node.netns.path, backend.sets), []);
      const line = await repairedLine('probe_set');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      assert.deepEqual(await probeSetEntries(node.netns.path, backend.sets), [{ ip: pod.ip, uid: pod.uid }]);
      assert.equal(await metric('probe_set', 'repaired'), 1);
    });

    it('a pod the reconnected ztunnel refused in its snapshot is sent again (ztunnel, repaired)', async () => {
      ztunnel.refuse = (req) => ('add' in req ? 'netns not ready' : undefined);
      await ztunnel.reconnect();
      const session = ztunnel.session;
      await ztunnel.waitFor(() => ztunnel.snapshots[session - 1] === 1, 'the refused snapshot');
      ztunnel.refuse = undefined;
      const line = await repairedLine('ztunnel');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      const resent = ztunnel.adds.filter((a) => a.uid === pod.uid && a.session === session && !a.inSnapshot);
      assert.equal(resent.length, 1, 'sent once more, outside the snapshot');
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.equal(await metric('ztunnel', 'repaired'), 1);
    });

    it('a pod annotated as enrolled whose ADD never reached the agent (a reboot in a chain rewrite) is found by IP and enrolled (not_enrolled, repaired)', async () => {
      stale = await node.addPod(NS, 'app-1', 1);
      v.netnsOf.set(stale.uid, stale.netns.path);
      const object = ambientPodObject(stale);
      object.metadata.annotations = { 'ambient.istio.io/redirection': 'enabled' };
      rig.api.upsertPod(object);
      const line = await v.driftLine(`${NS}/${stale.name}`, 'not_enrolled');
      assert.equal(line.action, 'repaired', JSON.stringify(line));
      assert.ok(inNetns(stale.netns.path, ['true']));
      assert.equal(
        await netnsRuleset(stale.netns.path),
        await netnsRuleset(pod.netns.path),
        'the same in-pod rules as a pod enrolled at ADD',
      );
      assert.deepEqual(
        (await probeSetEntries(node.netns.path, backend.sets)).filter((e) => e.uid === stale?.uid),
        [{ ip: stale.ip, uid: stale.uid }],
      );
      assert.equal(ztunnel.adds.filter((a) => a.uid === stale?.uid).length, 1, 'ztunnel was given its netns');
      assert.deepEqual(ztunnel.fdProblems, []);
      assert.equal(await metric('not_enrolled', 'repaired'), 1);
    });

    // Last: a reload with native nft also empties the probe sets, which the pods' own checks repair.
    let hostRepairs = 0;

    for (const [what, inject] of [
      ["the node's nat table flushed by an operator", 'flush'],
      ['a firewalld-style reload (nat chains flushed and deleted; with nft the whole ruleset)', 'reload'],
      ['an extra rule beside ours (a second jump, an extra rule in our chain)', 'extra'],
    ] as const) {
      it(`host probe rules: ${what} → put back within an interval, exactly the plan (host_rules, repaired)`, async () => {
        const programmed = await netnsRuleset(node.netns.path);
        const entries = await probeSetEntries(node.netns.path, backend.sets);
        const hostLine = (e: Record<string, unknown>) => e.msg === 'node state drifted from its plan' && e.state === 'host probe rules';
        const seen = rig.daemon.logged(hostLine).length;
        assert.ok(backend.host[inject](node.netns.path), 'drift injected');
        await until('the host rules drift logged', () => rig.daemon.logged(hostLine).length > seen);
        const line = rig.daemon.logged(hostLine)[seen] ?? {};
        assert.equal(line.action, 'repaired', JSON.stringify(line));
        assert.match(JSON.stringify(line.drift), /"host_rules"/);
        hostRepairs++;
        assert.equal(await metric('host_rules', 'repaired'), hostRepairs);
        // The pod's probe-set entry (gone with the nft ruleset) is back through the pod's own check.
        await until(
          'probe set entries back',
          async () => JSON.stringify(await probeSetEntries(node.netns.path, backend.sets)) === JSON.stringify(entries),
        );
        assert.equal(
          chainsSorted(await netnsRuleset(node.netns.path)),
          chainsSorted(programmed),
          'the host rules are the plan again, once each',
        );
      });
    }
  });
