/**
 * A runtime's netns directory in miniature: network namespaces held only by a bind mount of a
 * file in a scratch directory, with no process in them, as CRI-O leaves a pod's netns with
 * `drop_infra_ctr` until the app container starts (it bind-mounts `/proc/<pid>/ns/net` of a
 * short-lived process under `/var/run/netns`). `unshare --net=<file>` does the same: it creates the
 * namespace, mounts it on the file and exits.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A netns file of the directory (`name` as a runtime would write it). */
export interface DirNetns {
  name: string;
  path: string;
  /** Unmounts and removes the file (idempotent); the namespace goes with its last reference. */
  remove(): void;
}

export interface ScratchNetnsDir {
  path: string;
  /**
   * Creates `<path>/<name>` holding a new network namespace with lo up, and no process in it;
   * with `address` (CIDR), also `eth0` (a veth whose peer stays inside) holding it, the pod's IP.
   */
  add(name: string, address?: string): DirNetns;
  /** Removes every netns file still there, then the directory. */
  remove(): void;
}

function unmountAndUnlink(path: string): void {
  try {
    execFileSync('umount', [path], { stdio: 'ignore' });
  } catch {
    // not mounted (any more)
  }
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

export function createScratchNetnsDir(): ScratchNetnsDir {
  const path = mkdtempSync(join(tmpdir(), 'istio-cni-netns-'));
  const files = new Map<string, DirNetns>();
  return {
    path,
    add(name, address) {
      const file = join(path, name);
      writeFileSync(file, '');
      const netns: DirNetns = {
        name,
        path: file,
        remove() {
          files.delete(name);
          unmountAndUnlink(file);
        },
      };
      files.set(name, netns);
      try {
        execFileSync('unshare', [`--net=${file}`, '--', 'ip', 'link', 'set', 'lo', 'up'], { stdio: ['ignore', 'ignore', 'pipe'] });
        if (address !== undefined) {
          execFileSync('nsenter', [`--net=${file}`, '--', 'ip', '-batch', '-'], {
            input: ['link add eth0 type veth peer name peer0', `addr add ${address} dev eth0`, 'link set eth0 up', ''].join('\n'),
            stdio: ['pipe', 'ignore', 'pipe'],
          });
        }
      } catch (err) {
        netns.remove();
        throw err;
      }
      return netns;
    },
    remove() {
      for (const f of [...files.values()]) f.remove();
      rmdirSync(path);
    },
  };
}
