import { createNetnsOwnerOpener, type NsIoctl } from './netnsOwnerUserns.ts';
import { loadKoffi } from './seqpacket/loadKoffi.ts';

let ioctl: NsIoctl | undefined;

/** The daemon's `NetnsOwnerOpener`: libc's ioctl through koffi, bound on first use. */
export const openNetnsOwnerUserns = createNetnsOwnerOpener(() => {
  if (ioctl !== undefined) return ioctl;
  const fn = loadKoffi().load('libc.so.6').func('ioctl', 'int', ['int', 'unsigned long', '...']) as (...args: unknown[]) => number;
  ioctl = (fd, request) => fn(fd, request);
  return ioctl;
});
