import { monotonicNow } from '@istio-cni/kube';
import {
  createNetnsOwnershipCheck,
  createPodProcessNetnsLocator,
  createProcFs,
  type CommandRunner,
  type PodProcessNetnsLocator,
  type SharedProcessScan,
  shareProcessScan,
} from '@istio-cni/dataplane';
import type { SandboxRelocator, VerifiableAttachment } from './podVerifier.ts';

export interface SandboxRelocatorOptions {
  /** HOST_PROC_DIR: where the pods' processes are found, and the path the relocated netns gets. */
  hostProcDir: string;
  runner: CommandRunner;
  attachments: () => ReadonlyMap<string, Readonly<VerifiableAttachment>>;
  move(uid: string, from: string, to: { netns: string; inode: number }): void;
  /** How long one procfs scan serves every attachment that asks (one verification pass). */
  scanTtlMs?: number;
  now?: () => number;
}

/**
 * Finds a sidecar pod's sandbox re-created with no ADD reaching the agent (upstream issue 61182: a
 * pod runs uncaptured for days): its oldest process, by the pod UID in its cgroup, runs in a netns
 * other than the one its attachment names. That netns is taken as the pod's only once it carries
 * one of the pod's addresses, and is named by the process (`<proc>/<pid>/ns/net`, whose inode the
 * verifier checks at every pass, so a reused pid is never taken for the pod).
 */
export function createSandboxRelocator(options: SandboxRelocatorOptions): SandboxRelocator {
  const now = options.now ?? monotonicNow;
  const ttl = options.scanTtlMs ?? 5_000;
  let locator: Promise<PodProcessNetnsLocator> | undefined;
  let scan: SharedProcessScan | undefined;
  const getLocator = () =>
    (locator ??= createPodProcessNetnsLocator({
      procFs: createProcFs(options.hostProcDir),
      checkOwnership: createNetnsOwnershipCheck(options.runner),
    }));
  return {
    async locate(uid, ips) {
      const l = await getLocator();
      scan ??= shareProcessScan(() => l.scan(), ttl, now);
      const process = (await scan.get()).get(uid);
      if (process === undefined) return undefined;
      for (const a of options.attachments().values()) if (a.uid === uid && a.netnsInode === process.inode) return undefined;
      const addresses = ips.map((ip) => ip.split('/')[0] ?? '');
      if (!(await l.carries(process, addresses))) return undefined;
      return { netns: `${options.hostProcDir}/${process.pid}/ns/net`, inode: process.inode };
    },
    moved(a, to) {
      options.move(a.uid, a.netns, to);
    },
  };
}
