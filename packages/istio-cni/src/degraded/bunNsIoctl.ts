import { createRequire } from 'node:module';
import type { NsIoctl } from '@istio-cni/dataplane/sidecar';

/** The part of `bun:ffi` used here. */
interface BunFfi {
  dlopen(
    path: string,
    symbols: { ioctl: { args: ['i32', 'u64']; returns: 'i32' } },
  ): { symbols: { ioctl(fd: number, request: number): number } };
}

let ioctl: NsIoctl | undefined;

/**
 * libc's `ioctl(fd, request)` through Bun's FFI, bound on first use: the plugin is built with Bun's
 * compiler (no koffi in it). Throws under another runtime, where the caller's opener then fails the
 * command with that message.
 */
export function bunNsIoctl(): NsIoctl {
  if (ioctl !== undefined) return ioctl;
  const ffi = createRequire(import.meta.url)('bun:ffi') as BunFfi;
  const lib = ffi.dlopen('libc.so.6', { ioctl: { args: ['i32', 'u64'], returns: 'i32' } });
  ioctl = (fd, request) => lib.symbols.ioctl(fd, request);
  return ioctl;
}
