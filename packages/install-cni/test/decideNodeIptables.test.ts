import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRecordingCommandRunner } from '@istio-cni/dataplane';
import { decideNodeIptables } from '../src/ambient/decideNodeIptables.ts';
import { captureLogger } from './testHelpers.ts';

const HOST = '/host/proc/1/ns/net';
const upstreamLeftovers =
  '*nat\n:POSTROUTING ACCEPT [0:0]\n:ISTIO_POSTRT - [0:0]\n-A POSTROUTING -j ISTIO_POSTRT\n' +
  '-A ISTIO_POSTRT -p tcp -m owner --socket-exists -j SNAT --to-source 169.254.7.127\nCOMMIT\n';

/** A host whose iptables-legacy holds upstream's leftovers, iptables-nft the node's own rules. */
function host() {
  return createRecordingCommandRunner(({ argv, options }) => {
    const [program = '', ...args] = argv;
    if (args[0] === '--version')
      return { stdout: `${program} v1.8.9 (${program.includes('legacy') ? 'legacy' : 'nf_tables'})\n`, stderr: '' };
    if (options.netns !== HOST) return undefined;
    if (program === 'iptables-legacy-save') return { stdout: upstreamLeftovers, stderr: '' };
    if (program === 'iptables-nft-save') return { stdout: '*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j KUBE-FIREWALL\nCOMMIT\n', stderr: '' };
    return undefined;
  });
}

test("start-up: the backend is logged once with what was found where, and another agent's leftovers are removed", async () => {
  const runner = host();
  const { logger, lines } = captureLogger();
  const backend = await decideNodeIptables(runner, HOST, undefined, logger);
  assert.equal(backend.flavor, 'nft');
  const decisions = lines.filter((l) => l.msg === 'iptables backend');
  assert.equal(decisions.length, 1);
  assert.match(
    String(decisions[0]?.reason),
    /legacy: Istio nat\/POSTROUTING -> ISTIO_POSTRT, nat\/ISTIO_POSTRT; nft: non-Istio chains filter\/INPUT/,
  );
  const removal = runner.calls.find((c) => c.argv[0] === 'iptables-legacy-restore');
  assert.equal(removal?.options.netns, HOST);
  assert.match(removal?.options.stdin ?? '', /-D POSTROUTING 1\n-F ISTIO_POSTRT\n-X ISTIO_POSTRT/);
  assert.ok(lines.some((l) => l.level === 'warn' && /left in iptables-legacy/.test(String(l.msg))));
});
