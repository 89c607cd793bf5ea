/**
 * Runs an executable built for another CPU architecture on this machine: a linux/arm64 executable
 * on an x86-64 host goes through qemu's user-mode emulator (Debian package qemu-user-static), with
 * Debian's arm64 cross libraries (libc6-arm64-cross, libstdc++6-arm64-cross) as its dynamic loader's
 * root. One place for the build (scripts/build.ts runs the arm64 executables at build time) and the
 * tests that run them (the arm64 tier).
 *
 * The emulator is named on the command line rather than through binfmt_misc: nothing on the host is
 * registered or changed, and a host without binfmt_misc mounted runs them all the same. What follows:
 * an emulated process that execs another arm64 executable fails (the kernel cannot run it itself);
 * the host tools it execs (iptables, nft, ...) are x86-64 and run natively.
 */
import { closeSync, existsSync, openSync, readSync } from 'node:fs';
import { delimiter, join } from 'node:path';

export type Arch = 'x64' | 'arm64';

/** The ELF e_machine values of the architectures we build for. */
const ELF_MACHINE: Record<number, Arch> = { 62: 'x64', 183: 'arm64' };

/** The emulator and its library root per foreign architecture. */
interface Emulation {
  emulators: string[];
  sysroot: string;
  loader: string;
  debianPackages: string;
  /** The ELF header bytes and mask binfmt_misc matches (qemu's scripts/qemu-binfmt-conf.sh). */
  binfmt: { magic: string; mask: string };
}

const EMULATORS: Record<Arch, Emulation | undefined> = {
  x64: undefined,
  arm64: {
    emulators: ['qemu-aarch64-static', 'qemu-aarch64'],
    sysroot: '/usr/aarch64-linux-gnu',
    loader: 'lib/ld-linux-aarch64.so.1',
    debianPackages: 'qemu-user-static, libc6-arm64-cross, libstdc++6-arm64-cross',
    binfmt: {
      magic: '\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00',
      mask: '\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff',
    },
  },
};

function readHeader(file: string, length: number): Buffer | undefined {
  const header = Buffer.alloc(length);
  const fd = openSync(file, 'r');
  try {
    if (readSync(fd, header, 0, length, 0) < length) return undefined;
  } finally {
    closeSync(fd);
  }
  return header;
}

/** Whether `file` starts with the ELF magic. */
export function isElf(file: string): boolean {
  return readHeader(file, 4)?.readUInt32BE(0) === 0x7f454c46;
}

/** The architecture an ELF executable was built for, from its header; undefined for anything else. */
export function elfArch(file: string): Arch | undefined {
  const header = readHeader(file, 20);
  if (header === undefined || header.readUInt32BE(0) !== 0x7f454c46) return undefined;
  return ELF_MACHINE[header.readUInt16LE(18)];
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter).concat(['/usr/bin', '/usr/local/bin'])) {
    if (dir !== '' && existsSync(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** How this machine runs an executable of `arch`: the argv prefix, or why it cannot. */
export type Launcher = { prefix: string[]; emulated: boolean } | { missing: string };

/**
 * `sysroot` is where the emulated process's absolute paths are looked up first (its dynamic loader
 * and libraries): Debian's cross libraries by default, or an arm64 root filesystem.
 */
export function launcherFor(arch: Arch, sysroot?: string): Launcher {
  if (arch === hostArch()) return { prefix: [], emulated: false };
  const emulation = EMULATORS[arch];
  if (emulation === undefined) return { missing: `no emulator known for ${arch} on ${hostArch()}` };
  const emulator = emulation.emulators.map(onPath).find((p) => p !== undefined);
  const root = sysroot ?? emulation.sysroot;
  const loader = join(root, emulation.loader);
  if (emulator === undefined || !existsSync(loader))
    return {
      missing: `running ${arch} executables needs ${emulation.emulators[0]} and ${loader} (Debian packages ${emulation.debianPackages}; sudo make setup installs them)`,
    };
  return { prefix: [emulator, '-L', root], emulated: true };
}

/**
 * The line that registers this machine's emulator for `arch` with binfmt_misc (`F`: the kernel opens
 * the emulator at registration, so it runs inside a chroot that lacks it too).
 */
export function binfmtRegistration(arch: Arch): string {
  const emulation = EMULATORS[arch];
  if (emulation === undefined) throw new Error(`no emulator known for ${arch}`);
  const emulator = emulation.emulators.map(onPath).find((p) => p !== undefined);
  if (emulator === undefined)
    throw new Error(`${emulation.emulators[0]} is missing (Debian package qemu-user-static; sudo make setup installs it)`);
  return `:istio-cni-${arch}:M::${emulation.binfmt.magic}:${emulation.binfmt.mask}:${emulator}:F`;
}

export function hostArch(): Arch {
  if (process.arch === 'x64' || process.arch === 'arm64') return process.arch;
  throw new Error(`unsupported host architecture ${process.arch}`);
}

/** Why `file` (an executable of another architecture) cannot run on this machine, or false: a test's skip reason. */
export function emulationSkip(file: string): string | false {
  const arch = existsSync(file) ? elfArch(file) : undefined;
  if (arch === undefined) return false;
  const launcher = launcherFor(arch);
  return 'missing' in launcher ? launcher.missing : false;
}

/** The argv that runs `file` with `args` on this machine (through the emulator for a foreign executable). */
export function launchArgv(file: string, args: readonly string[] = []): [string, ...string[]] {
  // A bare name is a host tool looked up on PATH: native. A missing file is left to spawn to report.
  const arch = file.includes('/') && existsSync(file) ? elfArch(file) : undefined;
  if (arch === undefined) return [file, ...args];
  const launcher = launcherFor(arch);
  if ('missing' in launcher) throw new Error(`${file}: ${launcher.missing}`);
  return [...launcher.prefix, file, ...args] as [string, ...string[]];
}
