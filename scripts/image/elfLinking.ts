import { closeSync, openSync, readSync } from 'node:fs';

const PT_DYNAMIC = 2;
const PT_INTERP = 3;
const DT_NULL = 0;
const DT_NEEDED = 1;

export interface ElfLinking {
  /** PT_INTERP, e.g. `/lib64/ld-linux-x86-64.so.2`; absent for static executables and shared libraries. */
  interpreter?: string;
  /** How many DT_NEEDED entries the dynamic section has: 0 for a static executable. */
  needed: number;
}

/**
 * How an ELF file links, from its program headers and dynamic section. A file with no DT_NEEDED
 * (a static executable: Go with CGO off, busybox-static) needs no library, and the loader's own
 * `--list` cannot be asked about it (glibc's ld.so segfaults on it, exit 139).
 */
export function elfLinking(path: string): ElfLinking {
  const fd = openSync(path, 'r');
  try {
    const read = (offset: number, length: number): Buffer => {
      const buf = Buffer.alloc(length);
      const n = readSync(fd, buf, 0, length, offset);
      if (n !== length) throw new Error(`${path}: truncated ELF (wanted ${length} bytes at ${offset})`);
      return buf;
    };
    const ident = read(0, 64);
    if (!ident.subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) throw new Error(`${path} is not an ELF file`);
    const is64 = ident[4] === 2;
    const le = ident[5] === 1;
    const u16 = (b: Buffer, o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
    const u32 = (b: Buffer, o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
    const word = (b: Buffer, o: number) => (is64 ? Number(le ? b.readBigUInt64LE(o) : b.readBigUInt64BE(o)) : u32(b, o));
    const wordSize = is64 ? 8 : 4;
    const phoff = word(ident, is64 ? 0x20 : 0x1c);
    const phentsize = u16(ident, is64 ? 0x36 : 0x2a);
    const phnum = u16(ident, is64 ? 0x38 : 0x2c);
    const linking: ElfLinking = { needed: 0 };
    for (let i = 0; i < phnum; i++) {
      const ph = read(phoff + i * phentsize, phentsize);
      const type = u32(ph, 0);
      if (type !== PT_INTERP && type !== PT_DYNAMIC) continue;
      const segment = read(word(ph, is64 ? 0x08 : 0x04), word(ph, is64 ? 0x20 : 0x10));
      if (type === PT_INTERP) {
        linking.interpreter = segment.toString('latin1').replace(/\0.*$/s, '');
        continue;
      }
      for (let at = 0; at + 2 * wordSize <= segment.length; at += 2 * wordSize) {
        const tag = word(segment, at);
        if (tag === DT_NULL) break;
        if (tag === DT_NEEDED) linking.needed++;
      }
    }
    return linking;
  } finally {
    closeSync(fd);
  }
}
