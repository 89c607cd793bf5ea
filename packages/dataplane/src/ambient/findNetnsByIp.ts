import type { NetnsHandle } from './netnsHandle.ts';
import { type NetnsDirSource, searchNetnsDir } from './netnsDirSearch.ts';
import { parseProcStarttime } from './parseProcCgroup.ts';
import { parsePodAddress } from './podAddress.ts';
import type { NetnsOwnershipCheck } from './podNetnsProcFinder.ts';
import type { ProcFs } from './procFs.ts';
import { hostNetnsIdentity, sameNetns, scanProcesses, type ScanLog } from './procScan.ts';

export interface FindNetnsByIpOptions {
  procFs: ProcFs;
  /** Production: `createNetnsOwnershipCheck(runner)` (`ip -j addr show` inside the netns). */
  checkOwnership: NetnsOwnershipCheck;
  log?: ScanLog;
  /** Searched when no process's netns holds the IP (CRI-O with `drop_infra_ctr`: no process in it). */
  netnsDir?: NetnsDirSource;
}

/**
 * The network namespace holding `podIp`, found by scanning procfs (repair in place): every
 * process's `ns/net` is grouped by inode, the host netns is skipped (see `hostNetnsIdentity`; a pod
 * IP is never in it anyway, host-network pods are refused), and each remaining netns is entered
 * once to look for the address. When several namespaces hold it, the one whose oldest process
 * started first wins, which is normally the pod's pause container (the validation container may
 * exit at any moment). Unlike the ambient finder this needs no pod UID in the cgroup path, so it
 * works for any runtime. When no process's netns holds it, the netns directory is searched for
 * namespaces no process is in (every inode already entered is skipped). `undefined` when no netns
 * holds the address; the caller owns the returned handle.
 */
export async function findNetnsByIp(options: FindNetnsByIpOptions, podIp: string): Promise<NetnsHandle | undefined> {
  const { procFs, checkOwnership } = options;
  const log: ScanLog = options.log ?? (() => {});
  const wanted = parsePodAddress(podIp).address;
  const host = await hostNetnsIdentity(procFs, log);
  const oldestByInode = new Map<number, { pid: string; startTime: number }>();
  const outsideHostNetns = async (pid: string) => {
    const netns = await procFs.stat(`${pid}/ns/net`);
    if (sameNetns(netns, host)) return undefined;
    return { inode: netns.ino, startTime: parseProcStarttime(await procFs.readFile(`${pid}/stat`)) };
  };
  for await (const { pid, found } of scanProcesses(procFs, outsideHostNetns, log)) {
    const seen = oldestByInode.get(found.inode);
    if (seen === undefined || found.startTime < seen.startTime) oldestByInode.set(found.inode, { pid, startTime: found.startTime });
  }
  let best: NetnsHandle | undefined;
  for (const [inode, { pid, startTime }] of oldestByInode) {
    let netns: NetnsHandle;
    try {
      netns = await procFs.openNetns(`${pid}/ns/net`, { ownerStartTime: startTime });
    } catch (err) {
      log('debug', `pid ${pid}: cannot open its netns: ${(err as Error).message}`);
      continue;
    }
    if (netns.inode !== inode) {
      // The pid was reused between the scan and the open; its new netns is looked at on its own entry.
      netns.close();
      continue;
    }
    let owned = false;
    try {
      owned = await checkOwnership(netns, [wanted]);
    } catch (err) {
      log('debug', `pid ${pid}: cannot list the addresses of netns ${inode}: ${(err as Error).message}`);
    }
    if (!owned) {
      netns.close();
      continue;
    }
    if (best !== undefined) {
      log('warn', `more than one network namespace holds ${wanted}; using the one of the oldest process`);
      if ((best.ownerStartTime ?? 0) <= startTime) {
        netns.close();
        continue;
      }
      best.close();
    }
    best = netns;
  }
  if (best !== undefined || options.netnsDir === undefined) return best;
  const fromDir = await searchNetnsDir(options.netnsDir, new Map([[wanted, [wanted]]]), new Set([...oldestByInode.keys(), host.ino]), log);
  return fromDir.get(wanted);
}
