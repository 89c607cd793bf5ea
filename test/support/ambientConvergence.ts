/** What the ambient kernel tests wait for and check after a disturbance (restart, reconnect). */
import assert from 'node:assert/strict';
import { duplicates, iptablesRuleLines, nftRuleLines } from './ambientNodeState.ts';
import type { FakeAdd, FakeZtunnel } from './fakeZtunnel.ts';
import { netnsRuleset } from './netnsRuleset.ts';

export async function waitUntil(
  what: string,
  check: () => Promise<boolean> | boolean,
  describeState: () => Promise<string> | string = () => '',
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${await describeState()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A fresh ztunnel connection's snapshot: the agent's pod cache, as Add (with fd) / Keep. */
export async function freshSnapshot(ztunnel: FakeZtunnel): Promise<{ adds: FakeAdd[]; keeps: string[] }> {
  const logStart = ztunnel.log.length;
  await ztunnel.reconnect();
  const session = ztunnel.session;
  await ztunnel.waitFor(() => ztunnel.snapshots[session - 1] === 1, 'snapshot');
  const log = ztunnel.log.slice(logStart);
  return {
    adds: ztunnel.adds.filter((a) => a.session === session && a.inSnapshot),
    keeps: log
      .slice(0, log.indexOf('snapshot_sent'))
      .filter((l) => l.startsWith('keep:'))
      .map((l) => l.slice('keep:'.length)),
  };
}

/** No rule twice in any pod netns or the node's, and the host probe rule exactly once. */
export async function assertNoDuplicateRules(
  pods: Iterable<{ name: string; netns: { path: string } }>,
  nodeNetnsPath: string,
  backend: 'iptables' | 'nftables',
): Promise<void> {
  for (const p of pods) {
    assert.deepEqual(duplicates(await iptablesRuleLines(p.netns.path)), [], `duplicate rules in ${p.name}`);
    assert.deepEqual(duplicates(nftRuleLines(await netnsRuleset(p.netns.path))), [], `duplicate nft rules in ${p.name}`);
  }
  const host = await iptablesRuleLines(nodeNetnsPath);
  assert.deepEqual(duplicates(host), [], 'duplicate host rules');
  const hostNft = nftRuleLines(await netnsRuleset(nodeNetnsPath));
  assert.deepEqual(duplicates(hostNft), [], 'duplicate host nft rules');
  if (backend === 'iptables') assert.equal(host.filter((l) => l.endsWith('-A POSTROUTING -j ISTIO_POSTRT')).length, 1, host.join('\n'));
  else
    assert.equal(
      hostNft.filter((l) => l.includes('chain postrouting') && l.includes('snat ip to 169.254.7.127')).length,
      1,
      hostNft.join('\n'),
    );
}
