import { decidePod, type LocalPolicy, type Pod } from '@istio-cni/capture';
import { errorMessage } from '@istio-cni/cni';
import type { Logger } from '@istio-cni/handoff';
import { podIps } from '../ambient/meshDataplane.ts';
import type { ClusterView } from '../kube/clusterView.ts';
import { ADOPTED_KEY_PREFIX, type AmbientEnrolment } from './nodeAgentHandler.ts';
import type { SandboxRelocator, VerifiableAttachment } from './podVerifier.ts';

export interface SidecarAdoptionDeps {
  /** This node's pods (the informer's field selector) and the namespaces. */
  view: Pick<ClusterView, 'listPods' | 'getNamespace'>;
  policy: LocalPolicy;
  ambient: AmbientEnrolment;
  attachments(): ReadonlyMap<string, Readonly<VerifiableAttachment>>;
  /** The netns the pod's processes run in, when it carries one of `ips` (the sandbox relocator's search). */
  locate: SandboxRelocator['locate'];
  adopt(key: string, a: VerifiableAttachment): void;
  forget(key: string): void;
  logger: Logger;
}

/** A running pod with addresses, not on the host network, not being deleted: its sandbox is set up. */
function settled(pod: Pod): boolean {
  return (
    pod.metadata.uid !== undefined &&
    pod.metadata.deletionTimestamp === undefined &&
    pod.spec?.hostNetwork !== true &&
    pod.status?.phase === 'Running' &&
    podIps(pod).length > 0
  );
}

/**
 * Sidecar pods of this node that no ADD reached this agent for — set up by the plugin alone while
 * the agent was down (degraded mode), or by an earlier agent whose attachment record is lost — are
 * taken into verification: the netns their processes run in (found as the sandbox relocator finds a
 * replaced one: procfs by the pod UID in the cgroup, taken only when it carries one of the pod's
 * addresses) becomes an attachment under `adopted/<uid>`, checked against its plan and repaired
 * like any other from then on. Such an attachment goes when its pod leaves the API. Runs before
 * each verification pass; returns how many pods it adopted.
 */
export function createSidecarAdoption(deps: SidecarAdoptionDeps): () => Promise<number> {
  /** Pods whose failed search was logged: once until a search for them succeeds. */
  const warned = new Set<string>();
  return async () => {
    const pods = deps.view.listPods();
    const live = new Set(pods.map((p) => p.metadata.uid));
    for (const [key, a] of deps.attachments()) {
      if (key.startsWith(ADOPTED_KEY_PREFIX) && !live.has(a.uid)) deps.forget(key);
    }
    const tracked = new Set([...deps.attachments().values()].map((a) => a.uid));
    let adopted = 0;
    for (const pod of pods) {
      const uid = pod.metadata.uid;
      if (uid === undefined || tracked.has(uid) || !settled(pod)) continue;
      const namespace = pod.metadata.namespace ?? '';
      const name = pod.metadata.name ?? '';
      const decision = decidePod({
        podName: name,
        podNamespace: namespace,
        policy: deps.policy,
        ambient: deps.ambient,
        found: { pod, namespace: deps.view.getNamespace(namespace) },
      });
      if (decision.action !== 'sidecar') continue;
      const ips = podIps(pod);
      let found: { netns: string; inode: number } | undefined;
      try {
        found = await deps.locate(uid, ips);
      } catch (err) {
        if (!warned.has(uid))
          deps.logger.warn('could not look for the netns of a sidecar pod this agent did not add', {
            pod: `${namespace}/${name}`,
            error: errorMessage(err),
          });
        warned.add(uid);
        continue;
      }
      warned.delete(uid);
      if (found === undefined) continue;
      deps.adopt(`${ADOPTED_KEY_PREFIX}${uid}`, {
        namespace,
        name,
        uid,
        netns: found.netns,
        mode: 'sidecar',
        ips,
        netnsInode: found.inode,
      });
      deps.logger.info('sidecar pod taken into verification: no ADD reached this agent for it (degraded mode, or its record was lost)', {
        pod: `${namespace}/${name}`,
        netns: found.netns,
      });
      adopted++;
    }
    return adopted;
  };
}
