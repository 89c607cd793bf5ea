/**
 * NATIVE_NFTABLES where the node cannot honour it, as upstream's node agent decides
 * (`cni/pkg/nodeagent/server_linux.go`): an `nft` built without JSON output (a stand-in on PATH, no
 * root needed) or the iptables backend's probe ipset still in the node netns (a live switch from
 * iptables, complete after a reboot; root) keep the node on iptables, logged with the reason: the
 * plugin's config says so and the host probe rules go into iptables, never half in each backend.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { createAmbientNode } from '../support/ambientNode.ts';
import { type AmbientRig, startAmbientRig } from '../support/ambientRig.ts';
import { makeHostRoot, startDaemon } from '../support/daemonProcess.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';

/** An nft that answers --version and --check like nft 1.0.6, and -j as one built without JSON support does. */
const FAKE_NFT = `#!/bin/sh
case "$1" in
  --version) echo "nftables v1.0.6 (Lester Gooch #5)" ;;
  -j) echo "Error: JSON support not compiled-in" >&2; exit 1 ;;
  --check) cat >/dev/null ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
`;

const STAYS = 'NATIVE_NFTABLES=true, but this node stays on iptables';

describe('native nftables that the node cannot honour: the node stays on iptables', { timeout: 90_000 }, () => {
  it('nft without JSON output: the plugin is installed for iptables, the reason logged', async (t) => {
    const root = makeHostRoot();
    const bin = mkdtempSync(join(tmpdir(), 'fake-nft-'));
    t.after(() => {
      root.remove();
      rmSync(bin, { recursive: true, force: true });
    });
    writeFileSync(join(bin, 'nft'), FAKE_NFT);
    chmodSync(join(bin, 'nft'), 0o755);
    const daemon = await startDaemon(root, { PATH: `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`, NATIVE_NFTABLES: 'true' });
    t.after(() => daemon.stop());
    const line = await daemon.waitForLog((e) => e.msg === STAYS);
    assert.match(String(line.reason), /nft has no JSON output \(built without it\?\).*JSON support not compiled-in/);
    const conflist = JSON.parse(readFileSync(join(root.netDir, '10-primary.conflist'), 'utf8')) as { plugins: Record<string, unknown>[] };
    const istio = conflist.plugins.find((p) => p.type === 'istio-cni');
    assert.ok(istio, 'the plugin is installed');
    assert.notEqual(istio.native_nftables, true, 'the plugin programs sidecar pods with iptables too');
  });

  it('the iptables probe ipset still in the node netns (a live switch): host rules in iptables, no nft table', {
    skip: kernelSkip,
  }, async (t) => {
    const node = createAmbientNode();
    let rig: AmbientRig | undefined;
    t.after(async () => {
      await rig?.close();
      await node.remove();
    });
    execFileSync('ip', ['netns', 'exec', node.netns.name, 'ipset', 'create', 'istio-inpod-probes-v4', 'hash:ip', 'comment']);
    rig = await startAmbientRig(node.netns.path, { NATIVE_NFTABLES: 'true', VERIFY_INTERVAL: '0s' });
    const daemon = await rig.startDaemon();
    const line = await daemon.waitForLog((e) => e.msg === STAYS);
    assert.match(String(line.reason), /probe ipset istio-inpod-probes-v4 exists \(reboot the node to complete the switch\)/);
    const rules = await netnsRuleset(node.netns.path);
    assert.match(rules, /-A POSTROUTING -j ISTIO_POSTRT/, 'host probe rules in iptables');
    assert.doesNotMatch(rules, /istio-ambient-nat/, 'no nft host table beside them');
  });
});
