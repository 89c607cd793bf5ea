import type { NetnsHandle } from './netnsHandle.ts';
import { type NetnsDirSource, searchNetnsDir } from './netnsDirSearch.ts';
import { parseProcCgroup, parseProcStarttime, podIdentityFromCgroups } from './parseProcCgroup.ts';
import type { ProcFs } from './procFs.ts';
import { hostNetnsIdentity, sameNetns, scanProcesses, type ScanLog } from './procScan.ts';

/** What the dataplane needs to know about an ambient pod. */
export interface AmbientPod {
  uid: string;
  name: string;
  namespace: string;
  serviceAccount: string;
  /** Status IPs (`status.podIPs`, else `status.podIP`); empty while the pod has none yet. */
  ips: readonly string[];
}

/** Does an interface inside `netns` carry one of `podIps`? Rejects when it cannot tell. */
export type NetnsOwnershipCheck = (netns: NetnsHandle, podIps: readonly string[]) => Promise<boolean>;

export interface PodNetnsProcFinderOptions {
  procFs: ProcFs;
  checkOwnership: NetnsOwnershipCheck;
  log?: ScanLog;
  /**
   * Absolute path of the host's netns file, when the caller knows it better than procfs does.
   * Default: `1/ns/net` under the procfs root, or this process's own netns (`self/ns/net`, with a
   * warning) when pid 1 cannot be inspected.
   */
  hostNetnsPath?: string;
  /**
   * Searched for the pods the procfs scan did not find: a netns held by no process (CRI-O with
   * `drop_infra_ctr`) is only a file of the runtime's netns directory, matched by the pod's IPs.
   */
  netnsDir?: NetnsDirSource;
}

export interface FoundPodNetns {
  pod: AmbientPod;
  /** Owned by the caller from here on. */
  netns: NetnsHandle;
}

export interface PodNetnsProcFinder {
  /**
   * Pairs each wanted pod (by UID) with the netns of its oldest process, or else with the one file of
   * the netns directory holding its IPs. The caller owns the returned handles; every other handle
   * opened during the scan is closed by the scan.
   */
  findNetnsForPods(pods: ReadonlyMap<string, AmbientPod>): Promise<Map<string, FoundPodNetns>>;
}

/**
 * As upstream `podcgroupns_linux.go`. The host netns identity is read once here (see `hostNetnsIdentity`);
 * any process found in it is ignored, so a pod whose cgroup points at a host-netns process can
 * never get the host's namespace (upstream guards against the same).
 */
export async function createPodNetnsProcFinder(options: PodNetnsProcFinderOptions): Promise<PodNetnsProcFinder> {
  const { procFs, checkOwnership } = options;
  const log: ScanLog = options.log ?? (() => {});
  const host = await hostNetnsIdentity(procFs, log, options.hostNetnsPath);

  async function processEntry(
    pid: string,
    observed: Set<number>,
    pods: ReadonlyMap<string, AmbientPod>,
  ): Promise<FoundPodNetns | undefined> {
    const netnsPath = `${pid}/ns/net`;
    const netnsStat = await procFs.stat(netnsPath);
    // Read before the host check, as upstream does: several processes of one pod may sit in
    // different namespaces and the oldest wins.
    const ownerStartTime = parseProcStarttime(await procFs.readFile(`${pid}/stat`));
    if (sameNetns(netnsStat, host)) {
      log('debug', `pid ${pid}: ignoring the host netns`);
      return undefined;
    }
    if (observed.has(netnsStat.ino)) return undefined;
    let cgroupText: string;
    try {
      cgroupText = await procFs.readFile(`${pid}/cgroup`);
    } catch {
      return undefined;
    }
    const { podUid } = podIdentityFromCgroups(parseProcCgroup(cgroupText));
    const pod = pods.get(podUid);
    if (pod === undefined) return undefined;
    if (pod.ips.length === 0) {
      // Nothing to verify ownership against; CNI ADD or a later scan will enrol it.
      log(
        'debug',
        `pid ${pid}: pod ${pod.namespace}/${pod.name} has no IPs yet; cannot verify netns ownership, not enrolling on this scan`,
      );
      return undefined;
    }
    const netns = await procFs.openNetns(netnsPath, { ownerStartTime });
    if (netns.inode === host.ino) {
      // The pid was reused by a host-netns process between the stat and the open.
      netns.close();
      return undefined;
    }
    let owned = false;
    try {
      owned = await checkOwnership(netns, pod.ips);
      if (!owned) {
        log(
          'warn',
          `pid ${pid}: netns does not contain any IP of pod ${pod.namespace}/${pod.name}; refusing the pairing, a foreign process may be transiting another pod's netns`,
        );
      }
    } catch (err) {
      log('warn', `pid ${pid}: could not verify netns ownership for pod ${pod.namespace}/${pod.name}: ${(err as Error).message}`);
    }
    if (!owned) {
      // Not marked observed: the netns's rightful pod, scanned later, can still claim it.
      netns.close();
      return undefined;
    }
    observed.add(netnsStat.ino);
    return { pod, netns };
  }

  return {
    async findNetnsForPods(pods) {
      const found = new Map<string, FoundPodNetns>();
      const observed = new Set<number>();
      for await (const { found: candidate } of scanProcesses(procFs, (pid) => processEntry(pid, observed, pods), log)) {
        const uid = candidate.pod.uid;
        const existing = found.get(uid);
        if (existing !== undefined) {
          log('warn', `found more than one netns for pod ${uid}; using the oldest process's`);
          if ((existing.netns.ownerStartTime ?? 0) < (candidate.netns.ownerStartTime ?? 0)) {
            candidate.netns.close();
            continue;
          }
          existing.netns.close();
        }
        found.set(uid, candidate);
      }
      if (options.netnsDir === undefined) return found;
      // After procfs, not before: there the pod's UID is in the cgroup path and one `ip` runs per
      // candidate process's netns, where the directory needs one per file not yet entered.
      const missing = new Map([...pods].filter(([uid, pod]) => !found.has(uid) && pod.ips.length > 0));
      if (missing.size === 0) return found;
      const fromDir = await searchNetnsDir(
        options.netnsDir,
        new Map([...missing].map(([uid, pod]) => [uid, pod.ips])),
        new Set([...observed, host.ino]),
        log,
      );
      for (const [uid, netns] of fromDir) {
        const pod = missing.get(uid) as AmbientPod;
        log('debug', `pod ${pod.namespace}/${pod.name}: no process holds its netns; found ${JSON.stringify(netns.source)} by its IPs`);
        found.set(uid, { pod, netns });
      }
      return found;
    },
  };
}
