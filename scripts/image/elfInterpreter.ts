import { closeSync, openSync, readSync } from 'node:fs';

const PT_INTERP = 3;

/**
 * The ELF interpreter (PT_INTERP) a file names, e.g. `/lib64/ld-linux-x86-64.so.2`, or undefined
 * when it names none: a statically linked executable (Go with CGO off, busybox-static), which
 * needs no loader and no library. Read from the program headers, because the loader's own
 * `--list` does not answer for such a file (glibc's ld.so segfaults on it, exit 139).
 */
export function elfInterpreter(path: string): string | undefined {
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
    const phoff = word(ident, is64 ? 0x20 : 0x1c);
    const phentsize = u16(ident, is64 ? 0x36 : 0x2a);
    const phnum = u16(ident, is64 ? 0x38 : 0x2c);
    for (let i = 0; i < phnum; i++) {
      const ph = read(phoff + i * phentsize, phentsize);
      if (u32(ph, 0) !== PT_INTERP) continue;
      const offset = word(ph, is64 ? 0x08 : 0x04);
      const size = word(ph, is64 ? 0x20 : 0x10);
      return read(offset, size).toString('latin1').replace(/\0.*$/s, '');
    }
    return undefined;
  } finally {
    closeSync(fd);
  }
}
