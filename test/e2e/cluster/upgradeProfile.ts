import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import { DAEMONSET, helm, restartDaemonSet, waitDaemonSetReady, type LocalCluster } from './localCluster.ts';
import { isReady, waitFor, type Pod } from './workloads.ts';

/** `helm upgrade --reuse-values --set profile=<profile>` (and each `key=value` of `values`); see {@link upgradeWith}. */
export function upgradeToProfile(cluster: LocalCluster, profile: string, values: readonly string[] = []): Promise<void> {
  return upgradeWith(cluster, [`profile=${profile}`, ...values]);
}

/**
 * `helm upgrade --reuse-values` with each `key=value` of `set`, then until every node's agent is
 * replaced and Ready. A change that reaches only the ConfigMap leaves the DaemonSet's template alone,
 * so nothing rolls: as an operator would, the DaemonSet is then restarted (`kubectl rollout
 * restart`), the agents reading their environment at start.
 */
export async function upgradeWith(cluster: LocalCluster, set: readonly string[]): Promise<void> {
  const api = cluster.controlPlane.api;
  const agents = async () =>
    (await api.must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)).items;
  const generation = async () =>
    (await api.must<{ metadata: { generation?: number } }>('GET', `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/${DAEMONSET}`))
      .metadata.generation;
  const before = new Set((await agents()).map((p) => p.metadata.uid));
  const generationBefore = await generation();
  await helm(['upgrade', RELEASE_NAME, CHART_DIR, '--namespace', RELEASE_NAMESPACE, '--reuse-values', ...set.flatMap((s) => ['--set', s])]);
  if ((await generation()) === generationBefore) await restartDaemonSet(cluster.controlPlane);
  await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length, 180_000);
  await waitFor(
    `every ${DAEMONSET} pod replaced (${set.join(', ')}) and Ready`,
    async () => {
      const now = (await agents()).filter((p) => p.metadata.deletionTimestamp === undefined);
      return now.length === cluster.nodes.length && now.every((p) => isReady(p) && !before.has(p.metadata.uid)) ? true : undefined;
    },
    180_000,
  );
}
