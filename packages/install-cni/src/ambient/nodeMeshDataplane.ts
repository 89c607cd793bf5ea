import { AnnotationError, ambientPodOverrides, type AmbientConfig, type Pod } from '@istio-cni/capture';
import {
  applyAmbientPodRules,
  deleteAmbientPodRules,
  PodNetnsRefusedError,
  type AmbientRuleBackend,
  type AmbientRulesDeps,
  type BranchEniProbeRules,
  type NetnsHandle,
  type NetnsOwnershipCheck,
  type PodNetnsCache,
  type PodNetnsGuard,
  type PodNetnsProcFinder,
  type ProbeSetManager,
  type WorkloadInfo,
  type ZtunnelServer,
} from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { PodAnnotator } from '../kube/podStatusAnnotator.ts';
import { syncBranchEniProbeRules } from './syncBranchEniProbeRules.ts';
import { NonRetryableError, REDIRECTION_ANNOTATION, RetryableError, podIps, type MeshDataplane } from './meshDataplane.ts';

export interface NodeMeshDataplaneDeps {
  rules: AmbientRulesDeps;
  backend: AmbientRuleBackend;
  config: AmbientConfig;
  cache: PodNetnsCache;
  /** Finds netns for pods enrolled by the informer (no CNI path): as upstream `podcgroupns_linux.go`. */
  finder(): Promise<PodNetnsProcFinder>;
  /** Whether a netns carries one of the pod's IPs (`ip addr` inside it): a held netns still the pod's. */
  checkOwnership: NetnsOwnershipCheck;
  /**
   * Opens CNI netns paths under the host root (`/host` in the DaemonSet, where the host's /var/run
   * is mounted) and refuses the node's own netns, on both the CNI and the procfs path.
   */
  netnsGuard: PodNetnsGuard;
  sets: ProbeSetManager;
  /** AWS branch ENI probe rules (AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE); undefined when the setting is off. */
  branchEni?: BranchEniProbeRules;
  ztunnel: ZtunnelServer;
  annotator: PodAnnotator;
  logger: Logger;
}

export function workloadOf(pod: Pod): WorkloadInfo {
  return {
    name: pod.metadata.name ?? '',
    namespace: pod.metadata.namespace ?? '',
    serviceAccount: pod.spec?.serviceAccountName || 'default',
  };
}

/**
 * Upstream `meshdataplane_linux.go` on this node: in-pod rules, the ztunnel hand-over, the host probe set and the
 * enrolment annotation, in that order, each step idempotent so an informer retry converges.
 */
export function createNodeMeshDataplane(deps: NodeMeshDataplaneDeps): MeshDataplane {
  const { cache, logger } = deps;

  async function netnsFor(pod: Pod, uid: string, ips: readonly string[], netnsPath: string | undefined): Promise<NetnsHandle> {
    if (netnsPath !== undefined && netnsPath !== '') return deps.netnsGuard.openCniNetns(netnsPath);
    const cached = cache.get(uid);
    if (cached !== undefined && !cached.closed) return cached;
    const workload = workloadOf(pod);
    const finder = await deps.finder();
    const found = await finder.findNetnsForPods(
      new Map([[uid, { uid, name: workload.name, namespace: workload.namespace, serviceAccount: workload.serviceAccount, ips }]]),
    );
    const hit = found.get(uid);
    if (hit === undefined)
      throw new Error('no network namespace holding its IPs found: not through a process of the pod in procfs, nor in the netns directory');
    try {
      deps.netnsGuard.check(hit.netns);
    } catch (err) {
      hit.netns.close();
      throw err;
    }
    return hit.netns;
  }

  /**
   * Undoes a hand-over that cannot be completed (ztunnel has the pod, the probe set or annotation
   * could not follow), so the runtime's retry of the ADD starts clean. In-pod rules stay: applying
   * them again is a no-op.
   */
  async function rollBack(uid: string, ips: readonly string[], log: Logger): Promise<void> {
    cache.remove(uid);
    const steps: [string, () => Promise<unknown>][] = [
      ['remove the pod from ztunnel', () => deps.ztunnel.podDeleted(uid)],
      ['remove the pod from the host probe set', () => deps.sets.removePod(uid, ips)],
    ];
    for (const [what, step] of steps) {
      try {
        await step();
      } catch (err) {
        log.warn(`enrolment rollback: failed to ${what}`, { error: errorMessage(err) });
      }
    }
    log.info('enrolment rolled back; the ADD is to be retried');
  }

  const dataplane: MeshDataplane = {
    async addPodToMesh(pod, ips, netnsPath) {
      const uid = pod.metadata.uid ?? '';
      const log = logger.with({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` });
      if (uid === '') throw new NonRetryableError('pod has no UID');
      const workload = workloadOf(pod);
      cache.ensure(uid, workload);
      let netns: NetnsHandle;
      try {
        netns = cache.upsert(uid, workload, await netnsFor(pod, uid, ips, netnsPath));
      } catch (err) {
        cache.remove(uid);
        // Refused as such (CNI error 8), not as a generic failure; never retried.
        if (err instanceof PodNetnsRefusedError) throw err;
        throw new NonRetryableError(`failed to open the pod's network namespace: ${errorMessage(err)}`);
      }
      try {
        const { overrides, warnings } = ambientPodOverrides(pod);
        for (const w of warnings) log.warn(w);
        const applied = await applyAmbientPodRules(deps.rules, {
          netns,
          config: deps.config,
          backend: deps.backend,
          overrides,
          reconcile: deps.config.reconcile,
          // From the CNI ADD (a netns made for it); a running pod's may hold another agent's rules.
          freshNetns: netnsPath !== undefined,
        });
        if (applied.adopted) log.info(`in-pod rules found in iptables-${applied.adopted}: reconciled there, not copied`);
        if (applied.removedDuplicates) log.warn('removed a second copy of the in-pod rules', { backends: applied.removedDuplicates });
      } catch (err) {
        cache.remove(uid);
        if (err instanceof AnnotationError) throw new NonRetryableError(err.message);
        throw new NonRetryableError(`failed to program in-pod redirection: ${errorMessage(err)}`);
      }
      try {
        await netns.use(() => deps.ztunnel.podAdded(uid, workload, netns.fd));
      } catch (err) {
        // Rules are in place but ztunnel has not taken the pod: traffic is captured, not yet served.
        await deps.annotator
          .annotate(workload.namespace, workload.name, REDIRECTION_ANNOTATION, 'pending')
          .catch((e: unknown) => log.warn('failed to annotate pod as pending', { error: errorMessage(e) }));
        throw new RetryableError(`ztunnel did not take the pod: ${errorMessage(err)}`);
      }
      try {
        await deps.sets.addPod(uid, ips);
      } catch (err) {
        await rollBack(uid, ips, log);
        throw new RetryableError(`failed to add the pod to the host probe set: ${errorMessage(err)}`);
      }
      await syncBranchEniProbeRules(deps.branchEni, 'add', ips, log);
      try {
        // The client has already retried this idempotent patch within its deadline.
        await deps.annotator.annotate(workload.namespace, workload.name, REDIRECTION_ANNOTATION, 'enabled');
      } catch (err) {
        await rollBack(uid, ips, log);
        throw new RetryableError(`failed to annotate the pod: ${errorMessage(err)}`);
      }
    },

    async removePodFromMesh(pod, isDelete) {
      const uid = pod.metadata.uid ?? '';
      const log = logger.with({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` });
      const ips = podIps(pod);
      const { keptForOtherPods } = await deps.sets.removePod(uid, ips);
      for (const e of keptForOtherPods) {
        log.warn('probe-set entry for this IP belongs to another pod; left in place', { ip: e.ip, owner: e.uid });
      }
      await syncBranchEniProbeRules(deps.branchEni, 'remove', ips, log);
      const netns = cache.take(uid);
      try {
        if (netns !== undefined && !isDelete) {
          await deleteAmbientPodRules(deps.rules, { netns, config: deps.config, backend: deps.backend });
        } else if (netns === undefined && !isDelete) {
          log.warn('network namespace of the pod unknown; in-pod rules left in place');
        }
      } finally {
        netns?.close();
      }
      await deps.ztunnel.podDeleted(uid);
      try {
        await deps.annotator.annotate(pod.metadata.namespace ?? '', pod.metadata.name ?? '', REDIRECTION_ANNOTATION, null);
      } catch (err) {
        if (!isDelete) throw err;
      }
    },

    async syncPodIps(pod, ips) {
      const uid = pod.metadata.uid ?? '';
      const held = cache.get(uid);
      if (held !== undefined && !held.closed && !(await deps.checkOwnership(held, ips).catch(() => true))) {
        const log = logger.with({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` });
        log.warn('pod IPs moved to a network namespace this agent has not seen (sandbox re-created without it); enrolling that one', {
          ips,
        });
        return dataplane.replaceNetns(pod, ips);
      }
      await deps.sets.addPod(uid, ips);
      await syncBranchEniProbeRules(deps.branchEni, 'add', ips, logger.with({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` }));
    },

    async replaceNetns(pod, ips) {
      const uid = pod.metadata.uid ?? '';
      // Nothing runs in the old netns: it may be gone, or another sandbox's leftover.
      cache.take(uid)?.close();
      await deps.ztunnel.podDeleted(uid);
      await dataplane.addPodToMesh(pod, ips, undefined);
      const current = new Set(ips.map((ip) => ip.split('/')[0] ?? ip));
      const stale = (await deps.sets.list()).filter((e) => e.uid === uid && !current.has(e.ip)).map((e) => e.ip);
      if (stale.length > 0) {
        await deps.sets.removePod(uid, stale);
        await syncBranchEniProbeRules(
          deps.branchEni,
          'remove',
          stale,
          logger.with({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` }),
        );
      }
    },

    holdsNetns(uid) {
      const held = cache.get(uid);
      return held !== undefined && !held.closed;
    },
  };
  return dataplane;
}
