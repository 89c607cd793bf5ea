import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import { DAEMONSET, helm, waitDaemonSetReady, type LocalCluster } from './localCluster.ts';
import { isReady, waitFor, type Pod } from './workloads.ts';

/** `helm upgrade --reuse-values --set profile=<profile>`, then until every node's agent is replaced and Ready. */
export function upgradeToProfile(cluster: LocalCluster, profile: string): Promise<void> {
  return upgradeWith(cluster, [`profile=${profile}`]);
}

/** `helm upgrade --reuse-values` with each `key=value` of `set`, then until every node's agent is replaced and Ready. */
export async function upgradeWith(cluster: LocalCluster, set: readonly string[]): Promise<void> {
  const api = cluster.controlPlane.api;
  await helm(['upgrade', RELEASE_NAME, CHART_DIR, '--namespace', RELEASE_NAMESPACE, '--reuse-values', ...set.flatMap((s) => ['--set', s])]);
  await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
  await waitFor(
    `every ${DAEMONSET} pod upgraded (${set.join(', ')}) and Ready`,
    async () => {
      const agents = (
        await api.must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)
      ).items;
      return agents.length === cluster.nodes.length && agents.every(isReady) ? true : undefined;
    },
    180_000,
  );
}
