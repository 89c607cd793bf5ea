import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { repairFieldSelector } from '../src/repair/watchRepairPods.ts';
import { startRepairController } from '../src/repair/startRepairController.ts';
import { resolveSettings } from '../src/settings/settings.ts';
import { startNodeTaintRemover } from '../src/taint/startNodeTaintRemover.ts';
import type { Pod } from '@istio-cni/capture';
import { startFakeKubeApi } from '../../../test/support/fakeKubeApi.ts';
import { ObjectStore } from '../src/kube/clusterView.ts';
import { brokenPodWaiting } from './repairFixtures.ts';
import { captureLogger, tempDir, waitFor } from './testHelpers.ts';
import { join } from 'node:path';

const settings = (env: Record<string, string>) => resolveSettings({}, env, { hostname: () => 'host-a' });

describe('starting the repair controller', () => {
  it('the node is always appended to the field selector', () => {
    assert.equal(repairFieldSelector('', 'node-a'), 'spec.nodeName=node-a');
    assert.equal(repairFieldSelector('status.phase=Pending', 'node-a'), 'status.phase=Pending,spec.nodeName=node-a');
  });

  it('is not started when disabled, without a mode, or without API access (and says why)', () => {
    const { logger, lines } = captureLogger();
    const registry = new Registry();
    assert.equal(
      startRepairController({ settings: settings({ REPAIR_ENABLED: 'false', REPAIR_REPAIR_PODS: 'true' }), logger, registry }),
      undefined,
    );
    assert.equal(startRepairController({ settings: settings({}), logger, registry }), undefined);
    assert.match(String(lines.at(-1)?.msg), /all off: not started/);
    assert.equal(startRepairController({ settings: settings({ REPAIR_DELETE_PODS: 'true' }), logger, registry }), undefined);
    assert.equal(lines.at(-1)?.msg, 'no Kubernetes API configured: repair controller not started');
    assert.equal(lines.at(-1)?.component, 'repair');
  });

  it("shares the agent's pod informer when its selectors are the same, and watches on its own otherwise", async (t) => {
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    const kubeconfigPath = join(await tempDir(t), 'kubeconfig');
    api.writeKubeconfig(kubeconfigPath);
    const registry = () => new Registry();
    const store = new ObjectStore<Pod>();
    const sharedPods = { fieldSelector: 'spec.nodeName=node-a', store, synced: Promise.resolve() };
    const env = { REPAIR_REPAIR_PODS: 'false', REPAIR_DELETE_PODS: 'true', REPAIR_NODE_NAME: 'node-a' };
    const podWatches = () => api.requests.filter((r) => r.startsWith('GET /api/v1/pods')).length;

    const shared = startRepairController({
      settings: settings(env),
      kubeconfigPath,
      logger: captureLogger().logger,
      registry: registry(),
      sharedPods,
    });
    assert.ok(shared);
    t.after(() => shared.stop());
    await shared.synced;
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(podWatches(), 0);

    // Another node's selector, or a label selector of its own: a watch of its own.
    const others: Record<string, string>[] = [{ REPAIR_NODE_NAME: 'node-b' }, { REPAIR_LABEL_SELECTORS: 'app=x' }];
    for (const over of others) {
      const own = startRepairController({
        settings: settings({ ...env, ...over }),
        kubeconfigPath,
        logger: captureLogger().logger,
        registry: registry(),
        sharedPods,
      });
      assert.ok(own);
      t.after(() => own.stop());
      const before = podWatches();
      await own.synced;
      assert.ok(podWatches() > before, JSON.stringify(api.requests));
    }
  });

  it("a broken pod already in the shared informer's cache is handled at once", async (t) => {
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    const kubeconfigPath = join(await tempDir(t), 'kubeconfig');
    api.writeKubeconfig(kubeconfigPath);
    const store = new ObjectStore<Pod>();
    store.upsert(brokenPodWaiting);
    const controller = startRepairController({
      settings: settings({ REPAIR_REPAIR_PODS: 'false', REPAIR_DELETE_PODS: 'true', REPAIR_NODE_NAME: 'node-a' }),
      kubeconfigPath,
      logger: captureLogger().logger,
      registry: new Registry(),
      sharedPods: { fieldSelector: 'spec.nodeName=node-a', store, synced: Promise.resolve() },
    });
    assert.ok(controller);
    t.after(() => controller.stop());
    const name = brokenPodWaiting.metadata.name ?? '';
    await waitFor('the DELETE of the broken pod', () => api.requests.find((r) => r.startsWith('DELETE ') && r.includes(`/pods/${name}`)));
  });

  it('the taint remover is off by default and needs API access', () => {
    const { logger, lines } = captureLogger();
    assert.equal(startNodeTaintRemover({ settings: settings({}), logger }), undefined);
    assert.equal(lines.length, 0);
    assert.equal(startNodeTaintRemover({ settings: settings({ NODE_TAINT_ENABLED: 'true' }), logger }), undefined);
    assert.equal(lines.at(-1)?.msg, 'no Kubernetes API configured: the node readiness taint cannot be removed');
  });
});
