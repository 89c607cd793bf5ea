import type { NetnsOwnershipCheck } from './podNetnsProcFinder.ts';
import { parseProcCgroup, parseProcStarttime, podIdentityFromCgroups } from './parseProcCgroup.ts';
import type { ProcFs } from './procFs.ts';
import { hostNetnsIdentity, sameNetns, scanProcesses, type ScanLog } from './procScan.ts';

/** A pod's oldest process outside the host netns, and the netns it runs in. */
export interface PodProcessNetns {
  pid: string;
  /** `starttime` of `/proc/<pid>/stat`: with the pid, the process itself (a pid may be reused). */
  startTime: number;
  /** Inode of its `ns/net`. */
  inode: number;
}

export interface PodProcessNetnsLocator {
  /** Every pod UID found in the processes' cgroups, each with its oldest process outside the host netns. */
  scan(): Promise<Map<string, PodProcessNetns>>;
  /** Whether the same process (pid and start time) still runs in the same netns: two reads, no scan. */
  stillIn(process: PodProcessNetns): Promise<boolean>;
  /** Whether the process's netns (still `process.inode`) carries one of `podIps`. */
  carries(process: PodProcessNetns, podIps: readonly string[]): Promise<boolean>;
}

export interface PodProcessNetnsLocatorOptions {
  procFs: ProcFs;
  checkOwnership: NetnsOwnershipCheck;
  log?: ScanLog;
  /** As for `createPodNetnsProcFinder`. */
  hostNetnsPath?: string;
}

/**
 * Where each pod's processes run now, from procfs (the pod UID in the cgroup path, as upstream
 * `podcgroupns_linux.go`): the netns a pod runs in, to compare with the one held for it. Unlike the
 * finder nothing is opened during the scan; only `carries` enters a netns.
 */
export async function createPodProcessNetnsLocator(options: PodProcessNetnsLocatorOptions): Promise<PodProcessNetnsLocator> {
  const { procFs } = options;
  const log: ScanLog = options.log ?? (() => {});
  const host = await hostNetnsIdentity(procFs, log, options.hostNetnsPath);
  const read = async (pid: string): Promise<(PodProcessNetns & { uid: string }) | undefined> => {
    const netns = await procFs.stat(`${pid}/ns/net`);
    if (sameNetns(netns, host)) return undefined;
    const { podUid } = podIdentityFromCgroups(parseProcCgroup(await procFs.readFile(`${pid}/cgroup`)));
    if (podUid === '') return undefined;
    return { uid: podUid, pid, startTime: parseProcStarttime(await procFs.readFile(`${pid}/stat`)), inode: netns.ino };
  };
  const stillIn = async (p: PodProcessNetns): Promise<boolean> => {
    try {
      const netns = await procFs.stat(`${p.pid}/ns/net`);
      return netns.ino === p.inode && parseProcStarttime(await procFs.readFile(`${p.pid}/stat`)) === p.startTime;
    } catch {
      return false; // exited
    }
  };
  return {
    async scan() {
      const oldest = new Map<string, PodProcessNetns>();
      for await (const { found } of scanProcesses(procFs, read, log)) {
        const { uid, ...process } = found;
        const seen = oldest.get(uid);
        if (seen === undefined || process.startTime < seen.startTime) oldest.set(uid, process);
      }
      return oldest;
    },
    stillIn,
    async carries(p, podIps) {
      const netns = await procFs.openNetns(`${p.pid}/ns/net`, { ownerStartTime: p.startTime });
      try {
        // The pid may have been reused between the scan and the open: then it is not this netns.
        if (netns.inode !== p.inode || !(await stillIn(p))) return false;
        return await options.checkOwnership(netns, podIps);
      } finally {
        netns.close();
      }
    },
  };
}

/** One `scan()` shared by every caller within `ttlMs`; a failed scan is not kept. */
export interface SharedProcessScan {
  /** The current scan, or a new one when it is older than the TTL, `fresh`, or dropped. */
  get(fresh?: boolean): Promise<Map<string, PodProcessNetns>>;
  /** The next `get` scans again (a new verification pass). */
  drop(): void;
}

export function shareProcessScan(scan: () => Promise<Map<string, PodProcessNetns>>, ttlMs: number, now: () => number): SharedProcessScan {
  let taken: { at: number; byUid: Promise<Map<string, PodProcessNetns>> } | undefined;
  return {
    get(fresh = false) {
      if (fresh || taken === undefined || now() - taken.at > ttlMs) {
        const current = { at: now(), byUid: scan() };
        taken = current;
        current.byUid.catch(() => {
          if (taken === current) taken = undefined;
        });
      }
      return taken.byUid;
    },
    drop() {
      taken = undefined;
    },
  };
}
