/**
 * Node readiness taint: `dist/install-cni` with NODE_TAINT_ENABLED leaves the node's
 * `cni.istio.io/not-ready:NoSchedule` taint alone while the plugin cannot be installed (no primary
 * CNI config yet), and removes it exactly once after installation, through the fake API. Other
 * taints are kept; nothing adds the taint back.
 */
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { PRIMARY_CONFLIST, makeHostRoot, startDaemon } from '../support/daemonProcess.ts';
import { startFakeKubeApi } from '../support/fakeKubeApi.ts';
import { TEST_NODE } from '../support/meshPods.ts';

const TAINT = { key: 'cni.istio.io/not-ready', effect: 'NoSchedule' };
const OTHER = { key: 'dedicated', value: 'infra', effect: 'NoExecute' };

describe('node readiness taint', { timeout: 60_000 }, () => {
  it('is removed once, after the plugin is installed and the agent synced, and not before', async (t) => {
    const api = await startFakeKubeApi({ token: 'test-token' });
    t.after(() => api.close());
    const root = makeHostRoot();
    t.after(() => root.remove());
    rmSync(join(root.netDir, '10-primary.conflist'));
    api.upsertNode({ apiVersion: 'v1', kind: 'Node', metadata: { name: TEST_NODE }, spec: { taints: [OTHER, TAINT] } });
    const kubeconfig = join(root.dir, 'agent-kubeconfig');
    api.writeKubeconfig(kubeconfig);
    const apiUrl = new URL(api.url);
    const daemon = await startDaemon(
      root,
      {
        KUBECONFIG: kubeconfig,
        KUBERNETES_SERVICE_HOST: apiUrl.hostname,
        KUBERNETES_SERVICE_PORT: apiUrl.port,
        KUBERNETES_SERVICE_PROTOCOL: 'http',
        NODE_NAME: TEST_NODE,
        NODE_TAINT_ENABLED: 'true',
      },
      false,
    );
    t.after(() => daemon.stop());

    await daemon.waitForLog((e) => e.msg === 'informers synced');
    await daemon.waitForLog((e) => e.msg === 'chained plugin but no valid CNI network config yet; waiting');
    const nodeCalls = () => api.requests.filter((r) => r.includes(`/api/v1/nodes/${TEST_NODE}`));
    assert.deepEqual(nodeCalls(), [], 'the agent is synced but the plugin is not installed: the node is not touched');
    assert.deepEqual(api.getNode(TEST_NODE)?.spec?.taints, [OTHER, TAINT]);

    writeFileSync(join(root.netDir, '10-primary.conflist'), JSON.stringify(PRIMARY_CONFLIST, null, 2));
    await daemon.waitForLog((e) => e.msg === 'daemon ready: node readiness taint removed', 20_000);
    assert.deepEqual(api.getNode(TEST_NODE)?.spec?.taints, [OTHER], 'only the readiness taint is gone');
    assert.deepEqual(nodeCalls(), [`GET /api/v1/nodes/${TEST_NODE}`, `PATCH /api/v1/nodes/${TEST_NODE}`]);

    // The plugin's entry removed behind the installer's back: it re-inserts it, and the node is not touched again.
    const inserted = () => daemon.lines.filter((l) => l.includes('"inserted istio-cni into CNI config"')).length;
    assert.equal(inserted(), 1);
    writeFileSync(join(root.netDir, '10-primary.conflist'), JSON.stringify(PRIMARY_CONFLIST, null, 2));
    for (let i = 0; i < 400 && inserted() < 2; i++) await new Promise((r) => setTimeout(r, 25));
    assert.equal(inserted(), 2, daemon.lines.join('\n'));
    assert.equal(await daemon.stop(), 0);
    assert.deepEqual(nodeCalls().length, 2);
    assert.deepEqual(api.getNode(TEST_NODE)?.spec?.taints, [OTHER]);
  });
});
