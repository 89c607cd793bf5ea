import { closeSync, fstatSync, openSync, statSync } from 'node:fs';

/**
 * Opens the user namespace that owns a network namespace, when that is not this process's own: the
 * netns of a pod with `hostUsers: false` belongs to the pod's user namespace (containerd 2 creates it
 * there). The kernel then refuses iptables' owner match written from any other user namespace
 * (xt_owner's check: the writer's user namespace must own the netns; EINVAL), so the writer enters
 * this one too (`RunOptions.enterNetnsOwner`), as upstream's
 * tools/istio-iptables/pkg/dependencies/implementation_linux.go does. Returns an fd the caller
 * closes, or undefined for a netns of the agent's own user namespace (every other pod).
 */
export type NetnsOwnerOpener = (netnsPath: string) => number | undefined;

/** `ioctl(fd, request)` with no argument, as the runtime at hand binds libc's; -1 on failure. */
export type NsIoctl = (fd: number, request: number) => number;

// _IO(0xb7, 0x1) from linux/nsfs.h.
const NS_GET_USERNS = 0xb701;

export function createNetnsOwnerOpener(ioctl: () => NsIoctl): NetnsOwnerOpener {
  return (netnsPath) => {
    const netnsFd = openSync(netnsPath, 'r');
    try {
      const usernsFd = ioctl()(netnsFd, NS_GET_USERNS);
      if (usernsFd < 0) throw new Error(`NS_GET_USERNS on ${JSON.stringify(netnsPath)} failed`);
      const owner = fstatSync(usernsFd);
      const own = statSync('/proc/self/ns/user');
      if (owner.ino === own.ino && owner.dev === own.dev) {
        closeSync(usernsFd);
        return undefined;
      }
      return usernsFd;
    } finally {
      closeSync(netnsFd);
    }
  };
}
