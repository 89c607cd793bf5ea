import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { createJsonLogger } from '@istio-cni/handoff';
import { createKubeClient, loadKubeConfig } from '@istio-cni/kube';
import { watchCluster } from '../src/kube/watchCluster.ts';
import { startFakeKubeApi } from '../../../test/support/fakeKubeApi.ts';
import { tempDir, waitFor } from './testHelpers.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });
const pod = (name: string, node = 'n1') => ({
  metadata: { name, namespace: 'default' },
  spec: { nodeName: node, containers: [{ name: 'app' }] },
});

describe('watchCluster recovery', () => {
  for (const watchList of [true, false])
    it(`re-syncs after an API restart with compacted history (410 Gone) ${watchList ? 'by a streaming list' : 'by a list (WatchList off)'}: changes made meanwhile are neither lost nor duplicated`, async (t) => {
      const api = await startFakeKubeApi({ watchList });
      after(() => api.close());
      const dir = await tempDir(t);
      api.writeKubeconfig(`${dir}/kubeconfig`);
      api.upsertNamespace({ metadata: { name: 'default' } });
      api.upsertPod(pod('a'));
      api.upsertPod(pod('elsewhere', 'n2'));
      const watch = watchCluster(createKubeClient(loadKubeConfig({ kubeconfigPath: `${dir}/kubeconfig`, serviceAccountDir: dir })), {
        nodeName: 'n1',
        logger,
        retryDelayMs: 10,
      });
      t.after(() => watch.stop());
      const events: string[] = [];
      watch.view.onPodChange((type, p) => events.push(`${type} ${p.metadata.name}`));
      await watch.synced;
      assert.deepEqual(
        watch.view.listPods().map((p) => p.metadata.name),
        ['a'],
        "only this node's pods",
      );

      api.restartAndCompact();
      // While no watch is open: one pod appears, one goes away.
      api.upsertPod(pod('b'));
      api.deletePod('default', 'a');

      await waitFor('re-listed cache', () => {
        const names = watch.view
          .listPods()
          .map((p) => p.metadata.name)
          .sort();
        return names.join(',') === 'b' || undefined;
      });
      assert.deepEqual([...events].sort(), ['add a', 'add b', 'delete a']);
      const podSyncs = api.requests.filter(
        (r) => r.startsWith('GET /api/v1/pods?') && (watchList ? r.includes('sendInitialEvents=true') : !r.includes('watch=true')),
      );
      assert.equal(podSyncs.length, 2, `the pods were synced again, the same way: ${JSON.stringify(api.requests)}`);

      // The new watch is live: later changes arrive as events.
      api.upsertPod(pod('c'));
      await waitFor('c', () => watch.view.getPod('default', 'c'));
    });
});
