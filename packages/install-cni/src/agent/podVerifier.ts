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
  /**
   * The netns file's inode at ADD. A path that later names another netns (a `/proc/<pid>/ns/net`
   * whose pid was reused after a missed DEL) is never verified or repaired as this pod's.
   */
  netnsInode?: number;
}

/** The capture side of verification (the agent's `SidecarCaptureManager`). */
export interface CaptureInspector {
  inspect(pod: Pod | undefined, netns: string, podIps?: readonly string[]): Promise<Drift[]>;
  repair(pod: Pod, netns: string, podIps?: readonly string[]): Promise<string>;
  /** The addresses in the netns. */
  addresses(netns: string): Promise<string[]>;
}

/** Where a sidecar pod runs now when the netns it was added with is gone or replaced. */
export interface SandboxRelocator {
  /**
   * The netns of the pod's oldest process (procfs, by the UID in its cgroup), as a path, when it
   * carries one of `ips` and no other attachment of the pod already names it; else undefined.
   */
  locate(uid: string, ips: readonly string[]): Promise<{ netns: string; inode: number } | undefined>;
  /** The attachment names `to` from now on (saved across restarts). */
  moved(a: VerifiableAttachment, to: { netns: string; inode: number }): void;
}

export interface PodVerifierDeps {
  view: Pick<ClusterView, 'getPod' | 'getNamespace'>;
  capture: CaptureInspector;
  /** The inode of the netns file at `netns` now; undefined when it is gone. */
  netnsInode(netns: string): number | undefined;
  policy: LocalPolicy;
  ambient: AmbientEnrolment;
  /** Finds a replaced sandbox of a sidecar pod (upstream issue 61182's case); none: reported only. */
  relocate?: SandboxRelocator;
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
  /** `netns_replaced`: the rules go into the netns the pod runs in now, which the attachment names from then on. */
  const relocated = (
    a: VerifiableAttachment,
    pod: Pod,
    to: { netns: string; inode: number },
    ips: readonly string[],
    was: number | undefined,
  ): VerifyOutcome => {
    const before =
      was === undefined
        ? `${a.netns} is gone`
        : was === a.netnsInode
          ? `${a.netns} still names inode ${was}, where the pod no longer runs`
          : `${a.netns} now names inode ${was}`;
    const detail = `the pod's sandbox was replaced with no ADD: it runs in inode ${to.inode} (${to.netns}); ${before}, was inode ${a.netnsInode}`;
    return {
      status: 'drift',
      drift: [{ kind: 'netns_replaced', detail }],
      repair: async () => {
        await deps.capture.repair(pod, to.netns, ips);
        deps.relocate?.moved(a, to);
      },
    };
  };
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
    if (a.netnsInode !== undefined) {
      const inode = deps.netnsInode(a.netns);
      if (inode === undefined || inode !== a.netnsInode) {
        // The netns at the saved path is never inspected or repaired: nothing says it is the pod's.
        // The pod's sandbox re-created with no ADD reaching the agent is found where the pod's
        // processes run, and captured there once it holds one of the pod's addresses.
        let moved: { netns: string; inode: number } | undefined;
        try {
          moved = a.mode === 'sidecar' ? await deps.relocate?.locate(a.uid, ips) : undefined;
        } catch (err) {
          return { status: 'unverifiable', error: `locating the pod's sandbox: ${errorMessage(err)}` };
        }
        if (moved !== undefined) return relocated(a, pod, moved, ips, inode);
        if (inode === undefined) return { status: 'skipped', reason: 'network namespace is gone' };
        const detail = `${a.netns} is no longer the network namespace the pod was added with (inode ${inode}, was ${a.netnsInode}): not inspected, never repaired`;
        return { status: 'drift', drift: [{ kind: 'netns_replaced', detail }] };
      }
    }
    if (a.mode === 'sidecar' && a.netnsInode !== undefined && deps.relocate !== undefined) {
      // The saved netns kept alive (a bind mount nobody removed) while the pod's sandbox was re-created
      // elsewhere with its old address: checking the old one alone would never see the new one uncaptured.
      // A search that fails (no readable procfs) leaves the saved netns to be verified as before.
      const elsewhere = await deps.relocate.locate(a.uid, ips).catch(() => undefined);
      if (elsewhere !== undefined) return relocated(a, pod, elsewhere, ips, a.netnsInode);
    }
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
        // Rules are written only into a netns that holds one of the pod's addresses: an inode can be
        // reused once its netns is gone, an address of this pod in another pod's netns cannot be.
        const want = ips.map((ip) => ip.split('/')[0] ?? '');
        const found = await deps.capture.addresses(a.netns);
        if (want.length > 0 && !want.some((ip) => found.includes(ip))) {
          throw new Error(
            `${a.netns} holds none of the pod's addresses (${want.join(', ')}; found ${found.join(', ') || 'none'}): not repaired`,
          );
        }
        await deps.capture.repair(pod, a.netns, ips);
      },
    };
  };
}
