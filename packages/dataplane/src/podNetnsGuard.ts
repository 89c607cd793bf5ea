import { closeSync, constants, fstatSync, openSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';
import { createNetnsHandle, type NetnsHandle } from './ambient/netnsHandle.ts';

/** A namespace file's identity: every namespace file lives on the one nsfs device. */
export interface NsIdentity {
  dev: number;
  ino: number;
}

export interface NsFileFacts extends NsIdentity {
  /** The namespace type as the kernel names it (`net`, `mnt`, ...); `undefined` when unknown. */
  type: string | undefined;
}

/** What a pod netns is compared with. */
export interface NetnsReferences {
  /** The nsfs device (of `/proc/self/ns/net`). */
  nsfsDev: number;
  /** The node's netns (`<host proc>/1/ns/net`); `undefined` when pid 1 cannot be inspected. */
  node: NsIdentity | undefined;
  /** The netns this process runs in. */
  own: NsIdentity;
}

const sameNamespace = (a: NsIdentity, b: NsIdentity): boolean => a.dev === b.dev && a.ino === b.ino;

/**
 * Why `target` must not be treated as a pod's network namespace, or `undefined` when it may.
 * Programming or enrolling the node's own netns would capture the whole node's traffic, so it is
 * refused on every path (CNI ADD, degraded mode, repair, the ambient snapshot); so is the netns of
 * the process doing it, and anything that is not a network namespace. Upstream checks only its
 * procfs scan (`cni/pkg/nodeagent/podcgroupns.go`); see docs/architecture.md, "Where we differ
 * from upstream".
 */
export function podNetnsRefusal(target: NsFileFacts, refs: NetnsReferences): string | undefined {
  if (target.dev !== refs.nsfsDev) return 'it is not a namespace file';
  if (target.type !== 'net') {
    return target.type === undefined
      ? 'it is not recognisable as a network namespace'
      : `it is a ${target.type} namespace, not a network namespace`;
  }
  if (refs.node !== undefined && sameNamespace(target, refs.node)) return "it is the node's own network namespace";
  if (sameNamespace(target, refs.own)) {
    return refs.node === undefined
      ? "it is the network namespace istio-cni runs in (which stands in for the node's: pid 1 cannot be inspected)"
      : 'it is the network namespace istio-cni itself runs in';
  }
  return undefined;
}

/**
 * A refused pod netns. Callers answer CNI error 8 (`ErrorCode.InvalidNetNS`): the reference
 * library's own guard (skel: "plugin's netns and netns from CNI_NETNS should not be the same")
 * uses it for the same kind of refusal, and unlike 4 (a missing/invalid variable) or 7 (the
 * network configuration) it names exactly what is wrong; 11 would make the runtime retry a
 * request that can never succeed.
 */
export class PodNetnsRefusedError extends Error {
  override name = 'PodNetnsRefusedError';
  /** The netns as it was given (CNI_NETNS, or where a procfs scan found it). */
  readonly netns: string;

  constructor(netns: string, reason: string, options?: { resolved?: string; cause?: unknown }) {
    const where = options?.resolved !== undefined && options.resolved !== netns ? ` (resolved ${JSON.stringify(options.resolved)})` : '';
    super(
      `refusing network namespace ${JSON.stringify(netns)}${where}: ${reason}`,
      options?.cause === undefined ? {} : { cause: options.cause },
    );
    this.netns = netns;
  }
}

export interface PodNetnsGuardOptions {
  /** The host's procfs (HOST_PROC_DIR; `/proc` for the plugin): the node's netns is `<hostProcDir>/1/ns/net`. */
  hostProcDir: string;
  /** The node's netns file, when the caller knows it better than `<hostProcDir>/1/ns/net`. */
  hostNetnsPath?: string;
  /** Where the host's filesystem is mounted for CNI_NETNS paths (`/host` in the DaemonSet); default `/`. */
  hostRoot?: string;
}

export interface PodNetnsGuard {
  /**
   * Opens CNI_NETNS once and checks it; the caller owns the returned handle and runs everything
   * through it (`use`), so what was checked is what gets programmed. The path must be absolute;
   * `..` is resolved against the host root (never above it) before opening, in every path alike.
   * Throws {@link PodNetnsRefusedError}.
   */
  openCniNetns(netnsPath: string): NetnsHandle;
  /** Checks a handle found another way (a procfs scan); throws {@link PodNetnsRefusedError}. */
  check(handle: NetnsHandle): void;
}

const NS_NAME = /^([a-z_]+):\[(\d+)\]$/;

/**
 * The namespace type of an open nsfs fd. Opened through `/proc/<pid>/ns/*` the fd's link reads
 * `net:[<inode>]`; opened through a bind mount (`/var/run/netns/x`) it reads the mount point, and
 * the mount's root (field 4 of mountinfo) names the namespace instead. Node has no
 * `ioctl(NS_GET_NSTYPE)` without FFI, and the plugin carries none.
 */
function namespaceTypeOfFd(fd: number): string | undefined {
  const link = NS_NAME.exec(readlinkSync(`/proc/self/fd/${fd}`));
  if (link) return link[1];
  const mountId = /^mnt_id:\s*(\d+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1];
  if (mountId === undefined) return undefined;
  const mountinfo = readFileSync('/proc/self/mountinfo', 'utf8');
  const at = `\n${mountinfo}`.indexOf(`\n${mountId} `);
  if (at < 0) return undefined;
  const end = mountinfo.indexOf('\n', at);
  const root = mountinfo.slice(at, end < 0 ? undefined : end).split(' ')[3] ?? '';
  return NS_NAME.exec(root)?.[1];
}

function factsOfFd(fd: number): NsFileFacts {
  const st = fstatSync(fd);
  return { dev: st.dev, ino: st.ino, type: namespaceTypeOfFd(fd) };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Absolute, no NUL; `..` resolved lexically (`/..` stays `/`), then placed under `hostRoot`. */
export function resolveCniNetnsPath(netnsPath: string, hostRoot = '/'): string | undefined {
  if (typeof netnsPath !== 'string' || !netnsPath.startsWith('/') || netnsPath.includes('\0')) return undefined;
  return join(hostRoot, posix.normalize(netnsPath));
}

/** A Set that forgets its oldest entries beyond `limit`. */
class BoundedSet extends Set<string> {
  readonly #limit: number;
  constructor(limit: number) {
    super();
    this.#limit = limit;
  }
  override add(value: string): this {
    super.add(value);
    for (const oldest of this) {
      if (this.size <= this.#limit) break;
      this.delete(oldest);
    }
    return this;
  }
}

export function createPodNetnsGuard(options: PodNetnsGuardOptions): PodNetnsGuard {
  const nodePath = options.hostNetnsPath ?? join(options.hostProcDir, '1/ns/net');
  let own: NsIdentity | undefined;
  let node: NsIdentity | undefined;
  const accepted = new BoundedSet(4096);

  function references(): NetnsReferences {
    if (own === undefined) {
      const s = statSync('/proc/self/ns/net');
      own = { dev: s.dev, ino: s.ino };
    }
    if (node === undefined) {
      try {
        const s = statSync(nodePath);
        node = { dev: s.dev, ino: s.ino };
      } catch {
        // Unreadable pid 1 (a sandbox's init, a hardened procfs): the own netns stands in, as in the
        // procfs scans. Asked again next time.
      }
    }
    return { nsfsDev: own.dev, node, own };
  }

  return {
    openCniNetns(netnsPath) {
      const path = resolveCniNetnsPath(netnsPath, options.hostRoot);
      if (path === undefined) throw new PodNetnsRefusedError(String(netnsPath), 'it is not an absolute path');
      const refuse = (reason: string, cause?: unknown) =>
        new PodNetnsRefusedError(netnsPath, reason, { resolved: path, ...(cause === undefined ? {} : { cause }) });
      const refs = references();
      // stat before open: only nsfs files are opened, so a FIFO cannot block and a device is never opened.
      let st: NsIdentity;
      try {
        st = statSync(path);
      } catch (err) {
        throw refuse(`it cannot be opened: ${message(err)}`, err);
      }
      if (st.dev !== refs.nsfsDev) throw refuse('it is not a namespace file');
      let fd: number;
      try {
        fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
      } catch (err) {
        throw refuse(`it cannot be opened: ${message(err)}`, err);
      }
      try {
        // A namespace file once found acceptable stays so while it exists (its type, and whether it
        // is the node's or our own, cannot change), so a re-opened one skips the type lookup, which
        // reads mountinfo: continuous verification opens every pod's netns once per pass.
        const st = fstatSync(fd);
        const id = `${st.dev}:${st.ino}`;
        if (accepted.has(id)) return createNetnsHandle({ fd, inode: st.ino, source: path });
        const facts = factsOfFd(fd);
        const reason = podNetnsRefusal(facts, refs);
        if (reason !== undefined) throw refuse(reason);
        accepted.add(id);
        return createNetnsHandle({ fd, inode: facts.ino, source: path });
      } catch (err) {
        closeSync(fd);
        if (err instanceof PodNetnsRefusedError) throw err;
        throw refuse(`it cannot be inspected: ${message(err)}`, err);
      }
    },

    check(handle) {
      let reason: string | undefined;
      try {
        reason = podNetnsRefusal(factsOfFd(handle.fd), references());
      } catch (err) {
        throw new PodNetnsRefusedError(handle.source, `it cannot be inspected: ${message(err)}`, { cause: err });
      }
      if (reason !== undefined) throw new PodNetnsRefusedError(handle.source, reason);
    },
  };
}
