/**
 * Degraded mode (root, real kernel): the daemon dies (SIGKILL: nothing is cleaned up, as
 * after a crash, so the installer's kubeconfig stays in the run dir) and the plugin decides by
 * itself (docs/architecture.md "Degraded mode"): the same rules for a sidecar pod, code 11 for an ambient pod, pass
 * through for a plain pod, `Unauthorized` reported as such; the daemon comes back and hand-off
 * resumes.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PLUGIN_KUBECONFIG, runDirPath } from '@istio-cni/handoff';
import { findLog } from '../support/pluginLogLines.ts';
import { AMBIENT_LABEL, DEFAULT_ENABLEMENT_SELECTORS, namespaceObject, plainPod, sidecarPod } from '../support/meshPods.ts';
import { ANY_ISTIO_STATE, CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import { createPodNetworkFixture, type PodNetworkFixture } from '../support/podNetworkFixture.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { startAgentRig, type AgentRig, type PodAttachment } from '../support/startAgentRig.ts';

// A `hostUsers: false` pod: pod ids 0..65535 are host ids from here (as kubelet maps them).
const USERNS_BASE = 65_536 * 3;
const AMBIENT_CONF = { ambient_enabled: true, enablement_selectors: DEFAULT_ENABLEMENT_SELECTORS };

function attachmentOf(net: PodNetworkFixture, containerId: string): PodAttachment {
  return { netns: net.pod.path, containerId, address: `${net.pod.ipv4}/24`, gateway: net.node.ipv4 };
}

function cniError(stdout: string): { code: number; msg: string; details?: string } {
  return JSON.parse(stdout) as { code: number; msg: string; details?: string };
}

const variants: { name: string; env: Record<string, string> }[] = [
  { name: 'iptables backend as detected', env: {} },
  { name: 'native nftables', env: { NATIVE_NFTABLES: 'true' } },
  {
    name: 'FORCE_IPTABLES_BINARY=legacy',
    // The installer writes the daemon's setting into the plugin's netconf (force_iptables_binary).
    env: { FORCE_IPTABLES_BINARY: 'legacy' },
  },
];

for (const variant of variants)
  describe(`plugin degraded mode while the node agent is down, then back [${variant.name}]`, {
    skip: kernelSkip,
    timeout: 240_000,
  }, () => {
    let rig: AgentRig;
    /** The ruleset the agent programmed for a sidecar pod, to compare degraded mode against. */
    let agentRules: string;

    before(async () => {
      rig = await startAgentRig(variant.env);
      rig.api.upsertNamespace(namespaceObject('default'));
      rig.api.upsertNamespace(namespaceObject('mesh-ambient', { [AMBIENT_LABEL]: 'ambient' }));
      for (const name of ['ratings-0', 'ratings-1', 'ratings-2', 'ratings-3', 'userns-0', 'userns-1']) {
        rig.api.upsertPod(sidecarPod('default', name));
      }
      rig.api.upsertPod(plainPod('default', 'plain-0'));
      rig.api.upsertPod(plainPod('mesh-ambient', 'ztunnel-client-0'));
    });
    after(async () => {
      await rig?.close();
    });

    it('with the agent up: the sidecar pod is programmed by the agent (reference rules)', async (t) => {
      const net = createPodNetworkFixture(t);
      const res = await rig.exec('ADD', sidecarPod('default', 'ratings-0'), attachmentOf(net, 'c1'));
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.equal(findLog(res.stderr, 'pod handled by agent')?.verdict, 'redirected', res.stderr);
      agentRules = await netnsRuleset(net.pod.path);
      assert.match(agentRules, CAPTURE_CHAIN);
    });

    it('with the agent up: a hostUsers: false pod (its netns owned by its own user namespace) gets the same rules', async (t) => {
      const net = createPodNetworkFixture(t, { podUsernsBase: USERNS_BASE });
      const res = await rig.exec('ADD', sidecarPod('default', 'userns-0'), attachmentOf(net, 'u0'));
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.equal(findLog(res.stderr, 'pod handled by agent')?.verdict, 'redirected', res.stderr);
      assert.equal(await netnsRuleset(net.pod.path), agentRules);
    });

    it('the agent is killed; its socket answers nobody but the plugin kubeconfig stays', async () => {
      await rig.daemon.stop('SIGKILL');
      assert.ok(existsSync(runDirPath(rig.root.runDir, PLUGIN_KUBECONFIG)), 'installer-written kubeconfig left behind');
    });

    it('a sidecar pod gets exactly the rules the agent would have programmed', async (t) => {
      assert.ok(agentRules, 'reference rules recorded');
      const net = createPodNetworkFixture(t);
      const res = await rig.exec('ADD', sidecarPod('default', 'ratings-1'), attachmentOf(net, 'c2'));
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.ok(findLog(res.stderr, 'istio-cni node agent unreachable; deciding in the plugin'), res.stderr);
      assert.equal(findLog(res.stderr, 'pod handled in degraded mode')?.action, 'redirected', res.stderr);
      const out = JSON.parse(res.stdout) as { ips?: { address: string }[] };
      assert.deepEqual(
        out.ips?.map((ip) => ip.address),
        [`${net.pod.ipv4}/24`],
        'prevResult passed through',
      );
      assert.equal(await netnsRuleset(net.pod.path), agentRules);
    });

    it('a hostUsers: false sidecar pod gets the same rules in degraded mode too', async (t) => {
      const net = createPodNetworkFixture(t, { podUsernsBase: USERNS_BASE });
      const res = await rig.exec('ADD', sidecarPod('default', 'userns-1'), attachmentOf(net, 'u1'));
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.equal(findLog(res.stderr, 'pod handled in degraded mode')?.action, 'redirected', res.stderr);
      assert.equal(await netnsRuleset(net.pod.path), agentRules);
    });

    it('an ambient pod fails closed with code 11 and nothing programmed', async (t) => {
      const net = createPodNetworkFixture(t);
      const res = await rig.exec('ADD', plainPod('mesh-ambient', 'ztunnel-client-0'), attachmentOf(net, 'c3'), AMBIENT_CONF);
      assert.equal(res.code, 1, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      const err = cniError(res.stdout);
      assert.equal(err.code, 11);
      assert.match(err.msg, /ambient/);
      assert.doesNotMatch(await netnsRuleset(net.pod.path), ANY_ISTIO_STATE);
    });

    it('a plain pod passes through (ambient enabled too, its namespace is not selected)', async (t) => {
      const net = createPodNetworkFixture(t);
      for (const [containerId, extra] of [
        ['c4', {}],
        ['c5', AMBIENT_CONF],
      ] as const) {
        const res = await rig.exec('ADD', plainPod('default', 'plain-0'), attachmentOf(net, containerId), extra);
        assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
        assert.equal(findLog(res.stderr, 'pod handled in degraded mode')?.action, 'skipped', res.stderr);
        const out = JSON.parse(res.stdout) as { ips?: { address: string }[] };
        assert.deepEqual(
          out.ips?.map((ip) => ip.address),
          [`${net.pod.ipv4}/24`],
        );
      }
      assert.doesNotMatch(await netnsRuleset(net.pod.path), ANY_ISTIO_STATE);
    });

    it('a rejected token is reported as Unauthorized (code 11), not as a generic failure', async (t) => {
      const net = createPodNetworkFixture(t);
      const token = rig.api.token;
      rig.api.setToken('rotated-token');
      try {
        const res = await rig.exec('ADD', sidecarPod('default', 'ratings-2'), attachmentOf(net, 'c6'));
        assert.equal(res.code, 1, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
        const err = cniError(res.stdout);
        assert.equal(err.code, 11);
        assert.match(err.msg, /Unauthorized/);
      } finally {
        rig.api.setToken(token);
      }
      assert.doesNotMatch(await netnsRuleset(net.pod.path), ANY_ISTIO_STATE);
    });

    it('STATUS (CNI 1.1.0) with the daemon down: 0 whether degraded mode could decide pods or not (ambient on, token rejected)', async () => {
      const status = (extra: Record<string, unknown> = {}) =>
        rig.exec('STATUS', plainPod('default', 'plain-0'), { netns: '', containerId: '' }, { cniVersion: '1.1.0', ...extra });
      const ok = await status();
      assert.equal(ok.code, 0, `stdout: ${ok.stdout}\nstderr: ${ok.stderr}`);
      const ambient = await status(AMBIENT_CONF);
      assert.equal(ambient.code, 0, ambient.stdout);
      const token = rig.api.token;
      rig.api.setToken('rotated-token');
      try {
        const rejected = await status();
        assert.equal(rejected.code, 0, rejected.stdout);
      } finally {
        rig.api.setToken(token);
      }
    });

    it('the daemon starts again and hand-off resumes', async (t) => {
      const daemon = await rig.restartDaemon();
      const net = createPodNetworkFixture(t);
      const res = await rig.exec('ADD', sidecarPod('default', 'ratings-3'), attachmentOf(net, 'c7'));
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.equal(findLog(res.stderr, 'pod handled by agent')?.verdict, 'redirected', res.stderr);
      assert.equal(findLog(res.stderr, 'istio-cni node agent unreachable; deciding in the plugin'), undefined);
      await daemon.waitForLog((e) => e.msg === 'sidecar capture programmed' && e.pod === 'default/ratings-3');
      assert.equal(await netnsRuleset(net.pod.path), agentRules);
    });
  });
