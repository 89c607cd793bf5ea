import {
  AmbientDataplaneError,
  type NetnsHandle,
  type NetnsOwnershipCheck,
  parsePodAddress,
  parseProcStarttime,
  type ProcFs,
  type ScanLog,
} from '@istio-cni/dataplane';

export interface FindNetnsByIpOptions {
  procFs: ProcFs;
  /** Production: `createNetnsOwnershipCheck(runner)` (`ip -j addr show` inside the netns). */
  checkOwnership: NetnsOwnershipCheck;
  log?: ScanLog;
}

interface Candidate {
  pid: string;
  startTime: number;
}

/**
 * `1/ns/net`; where pid 1 cannot be inspected (a sandbox's init, a hardened procfs) our own
 * netns stands in: it is the host's when the daemon runs with hostNetwork, and never a pod's to
 * repair otherwise. A pod IP is never in the host netns anyway (host-network pods are refused).
 */
async function hostNetnsIdentity(procFs: ProcFs, log: ScanLog): Promise<{ ino: number; dev: number }> {
  try {
    return await procFs.stat('1/ns/net');
  } catch (err) {
    log('warn', `cannot inspect the host netns through pid 1 (${(err as Error).message}); skipping this process's netns instead`);
    return procFs.stat('self/ns/net');
  }
}

/**
 * The network namespace holding `podIp`, found by scanning procfs (upstream `cni/pkg/repair/netns_linux.go`):
 * every process's `ns/net` is grouped by inode, the host netns (`1/ns/net`) is skipped, and each
 * remaining netns is entered once to look for the address. When several namespaces hold it, the
 * one whose oldest process started first wins, which is normally the pod's pause container (the
 * validation container may exit at any moment). Unlike the ambient finder this needs no pod UID
 * in the cgroup path, so it works for any runtime. The caller owns the returned handle.
 */
export async function findNetnsByIp(options: FindNetnsByIpOptions, podIp: string): Promise<NetnsHandle> {
  const { procFs, checkOwnership } = options;
  const log: ScanLog = options.log ?? (() => {});
  const wanted = parsePodAddress(podIp).address;
  const host = await hostNetnsIdentity(procFs, log);
  const oldestByInode = new Map<number, Candidate>();
  const pids = (await procFs.readDir())
    .filter((e) => e.isDirectory && /^\d+$/.test(e.name))
    .map((e) => e.name)
    .sort((a, b) => Number(a) - Number(b));
  for (const pid of pids) {
    try {
      const netns = await procFs.stat(`${pid}/ns/net`);
      if (netns.ino === host.ino && netns.dev === host.dev) continue;
      const startTime = parseProcStarttime(await procFs.readFile(`${pid}/stat`));
      const seen = oldestByInode.get(netns.ino);
      if (seen === undefined || startTime < seen.startTime) oldestByInode.set(netns.ino, { pid, startTime });
    } catch (err) {
      // Processes exit during the scan; one vanished entry must not stop the others.
      log('debug', `pid ${pid}: skipped: ${(err as Error).message}`);
    }
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
  if (best === undefined) {
    throw new AmbientDataplaneError('ERR_AMBIENT_NETNS', `no network namespace on this node holds pod IP ${JSON.stringify(podIp)}`);
  }
  return best;
}
