import type { AmbientPod } from './podNetnsProcFinder.ts';
import { parsePodAddress } from './podAddress.ts';
import type { ProbeSetManager } from './probeSets.ts';

export interface SyncProbeSetsResult {
  added: string[];
  pruned: string[];
  /** Some pod had no IP yet, so the snapshot was not trusted for pruning. */
  pruneSkipped: boolean;
  /** Per-pod add failures (e.g. IP collisions); the pods will fail their probes. */
  errors: string[];
}

/**
 * As upstream `server.go` `Start`: put every snapshot pod's IPs in the probe sets; then, only if every pod had
 * IPs, remove entries no snapshot pod accounts for. A pod read without IPs (kubelet has not
 * re-posted its status yet) would otherwise lose its entry and fail its probes.
 */
export async function syncProbeSets(sets: ProbeSetManager, pods: readonly AmbientPod[]): Promise<SyncProbeSetsResult> {
  const added: string[] = [];
  const errors: string[] = [];
  let pruneSkipped = false;
  for (const pod of pods) {
    if (pod.ips.length === 0) {
      pruneSkipped = true;
      continue;
    }
    try {
      added.push(...(await sets.addPod(pod.uid, pod.ips)));
    } catch (err) {
      errors.push(`pod ${pod.namespace}/${pod.name}: ${(err as Error).message}`);
    }
  }
  const pruned: string[] = [];
  if (!pruneSkipped) {
    const keep = new Set(added.map((ip) => parsePodAddress(ip).address));
    for (const entry of await sets.list()) {
      if (keep.has(entry.ip)) continue;
      await sets.removeIp(entry.ip);
      pruned.push(entry.ip);
    }
  }
  return { added, pruned, pruneSkipped, errors };
}
