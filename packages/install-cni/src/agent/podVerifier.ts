import { decidePod, type LocalPolicy, type Pod } from '@istio-cni/capture';
import { errorMessage } from '@istio-cni/cni';
import { type Drift, PodNetnsRefusedError } from '@istio-cni/dataplane';
import { podIps } from '../ambient/meshDataplane.ts';
import type { ClusterView } from '../kube/clusterView.ts';
import type { AmbientEnrolment } from './nodeAgentHandler.ts';
import type { VerifyOutcome } from './verificationLoop.ts';

/** How the agent handled a pod at ADD: captured (sidecar), enrolled (ambient), or left alone (none). */
export type AttachmentMode = 'sidecar' | 'ambient' | 'none';

/** A pod the agent saw at ADD, with where its netns is. */
export interface VerifiableAttachment {
  namespace: string;
  name: string;
  uid: string;
  netns: string;
  mode: AttachmentMode;
  /** The pod's addresses from the CNI result at ADD (`ip/prefix`): the IP family without entering the netns. */
  ips?: string[];
}

/** The capture side of verification (the agent's `SidecarCaptureManager`). */
export interface CaptureInspector {
  inspect(pod: Pod | undefined, netns: string, podIps?: readonly string[]): Promise<Drift[]>;
  repair(pod: Pod, netns: string, podIps?: readonly string[]): Promise<string>;
}

export interface PodVerifierDeps {
  view: Pick<ClusterView, 'getPod' | 'getNamespace'>;
  capture: CaptureInspector;
  policy: LocalPolicy;
  ambient: AmbientEnrolment;
}

/** The netns file is gone: the sandbox is being torn down, which DEL handles. */
function netnsGone(err: unknown): boolean {
  return err instanceof PodNetnsRefusedError && (err.cause as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

/**
 * Checks one tracked pod against what its decision implies now. Anything a normal path owns is
 * skipped, not treated as drift: the pod gone, replaced (another UID) or being deleted, its
 * decision no longer the one it was added with (a label removed: the informers or the next ADD
 * handle it), or its netns removed.
 */
export function createPodVerifier(deps: PodVerifierDeps): (a: VerifiableAttachment) => Promise<VerifyOutcome> {
  return async (a) => {
    const pod = deps.view.getPod(a.namespace, a.name);
    if (pod === undefined) return { status: 'skipped', reason: 'pod no longer in the cache' };
    if (pod.metadata.uid !== undefined && pod.metadata.uid !== a.uid) return { status: 'skipped', reason: 'pod replaced (new UID)' };
    if (pod.metadata.deletionTimestamp) return { status: 'skipped', reason: 'pod is being deleted' };
    if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return { status: 'skipped', reason: 'pod has terminated' };
    const decision = decidePod({
      podName: a.name,
      podNamespace: a.namespace,
      policy: deps.policy,
      ambient: deps.ambient,
      found: { pod, namespace: deps.view.getNamespace(a.namespace) },
    });
    const mode: AttachmentMode | 'fail' = decision.action === 'skip' ? 'none' : decision.action;
    if (mode !== a.mode) return { status: 'skipped', reason: `decision changed from ${a.mode} to ${mode}` };
    if (a.mode === 'ambient') return { status: 'skipped', reason: 'ambient pods are verified by the ambient agent' };
    const fromStatus = podIps(pod);
    const ips = fromStatus.length > 0 ? fromStatus : (a.ips ?? []);
    let drift: Drift[];
    try {
      drift = await deps.capture.inspect(a.mode === 'sidecar' ? pod : undefined, a.netns, ips);
    } catch (err) {
      if (netnsGone(err)) return { status: 'skipped', reason: 'network namespace is gone' };
      return { status: 'unverifiable', error: errorMessage(err) };
    }
    if (drift.length === 0) return { status: 'ok' };
    // Rules we did not write in a pod outside the mesh are someone else's: reported, never removed.
    if (a.mode === 'none') return { status: 'drift', drift };
    return {
      status: 'drift',
      drift,
      repair: async () => {
        await deps.capture.repair(pod, a.netns, ips);
      },
    };
  };
}
