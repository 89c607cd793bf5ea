/**
 * What goes into the node image, and the cut from a full Debian root filesystem down to it.
 *
 * The daemon executes the iptables family (nft and legacy backends, with and without the suffix),
 * nft, ipset, ip, nsenter, and for its scratch network namespaces unshare and cat. The image holds
 * those executables, the libraries the Debian root filesystem's own loader resolves for them, the
 * iptables extensions it dlopens, the CA bundle, and the copyright file of every package a file
 * comes from: no shell, no package manager.
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join, posix } from 'node:path';
import { elfArch, hostArch, isElf, launcherFor } from '../../test/support/emulation.ts';
import { elfLinking } from './elfLinking.ts';
import type { ImagePlatform } from './platforms.ts';

export const DEBIAN_SUITE = 'bookworm';
/** The machine's own mirror list (deb.debian.org), main and security updates. */
export const DEBIAN_MIRRORS = [
  'deb http://deb.debian.org/debian bookworm main',
  'deb http://deb.debian.org/debian bookworm-updates main',
  'deb http://deb.debian.org/debian-security bookworm-security main',
];
export const DEBIAN_PACKAGES = ['libstdc++6', 'iptables', 'nftables', 'ipset', 'iproute2', 'util-linux', 'ca-certificates'];

const IPTABLES_NAMES = ['iptables', 'ip6tables'].flatMap((base) =>
  ['', '-nft', '-legacy'].flatMap((flavor) => ['', '-save', '-restore'].map((verb) => `${base}${flavor}${verb}`)),
);

/** Executables the daemon runs, by the name it runs them (looked up in usr/sbin then usr/bin). */
export const EXECUTABLES = [...IPTABLES_NAMES, 'nft', 'ipset', 'ip', 'nsenter', 'unshare', 'cat'];

/** Directories copied whole: the plugins iptables dlopens per match/target. */
const dlopenedDirs = (platform: ImagePlatform) => [`usr/lib/${platform.multiarch}/xtables`];

/** Data files the tools read, copied when the Debian tree has them. */
const DATA_FILES = ['etc/ssl/certs/ca-certificates.crt', 'etc/iproute2', 'usr/share/iproute2', 'etc/protocols', 'etc/ethertypes'];

/** Follows `rel` (relative to `root`) through symlinks as the image would see them; returns each link met and the final path. */
function walk(root: string, rel: string): { links: { path: string; target: string }[]; real: string } {
  const links: { path: string; target: string }[] = [];
  let parts = rel.split('/').filter((p) => p !== '' && p !== '.');
  let done: string[] = [];
  for (let hops = 0; parts.length > 0; hops++) {
    if (hops > 64) throw new Error(`symlink loop resolving ${rel} in ${root}`);
    const part = parts.shift() as string;
    if (part === '..') {
      done.pop();
      continue;
    }
    const path = [...done, part].join('/');
    const st = lstatSync(join(root, path), { throwIfNoEntry: false });
    if (st === undefined) throw new Error(`${path} (for ${rel}) is not in ${root}`);
    if (!st.isSymbolicLink()) {
      done.push(part);
      continue;
    }
    const target = readlinkSync(join(root, path));
    links.push({ path, target });
    if (target.startsWith('/')) done = [];
    parts = [...target.split('/').filter((p) => p !== '' && p !== '.'), ...parts];
  }
  return { links, real: done.join('/') };
}

/** Copies `rel` from `src` to `dst`: every symlink on the way as the same link, then the file or tree. */
function copyPath(src: string, dst: string, rel: string, copied: Set<string>): void {
  const { links, real } = walk(src, rel);
  for (const link of links) {
    if (copied.has(link.path)) continue;
    copied.add(link.path);
    mkdirSync(dirname(join(dst, link.path)), { recursive: true });
    symlinkSync(link.target, join(dst, link.path));
  }
  copyReal(src, dst, real, copied);
}

function copyReal(src: string, dst: string, real: string, copied: Set<string>): void {
  if (copied.has(real)) return;
  const st = lstatSync(join(src, real));
  if (st.isDirectory()) {
    mkdirSync(join(dst, real), { recursive: true });
    for (const name of readdirSync(join(src, real)).sort()) {
      const child = posix.join(real, name);
      if (lstatSync(join(src, child)).isSymbolicLink()) copyPath(src, dst, child, copied);
      else copyReal(src, dst, child, copied);
    }
    copied.add(real);
    return;
  }
  copied.add(real);
  mkdirSync(dirname(join(dst, real)), { recursive: true });
  copyFileSync(join(src, real), join(dst, real));
  chmodSync(join(dst, real), st.mode & 0o7777);
}

function findExecutable(root: string, name: string): string {
  for (const dir of ['usr/sbin', 'usr/bin']) {
    if (lstatSync(join(root, dir, name), { throwIfNoEntry: false }) !== undefined) return `${dir}/${name}`;
  }
  throw new Error(`${name} is not in the Debian root filesystem`);
}

/**
 * The libraries an ELF file needs, as paths the Debian tree's own loader resolves (`ld.so --list`,
 * chrooted; for another architecture under qemu-user with the tree as its root); none for a file
 * without DT_NEEDED (a static executable), which the loader cannot list.
 */
export function neededLibraries(root: string, rel: string, platform: ImagePlatform): string[] {
  if (elfLinking(join(root, rel)).needed === 0) return [];
  let argv: string[];
  if (platform.arch === hostArch()) {
    argv = ['chroot', root, `/${platform.loader}`, '--list', `/${rel}`];
  } else {
    const launcher = launcherFor(platform.arch, root);
    if ('missing' in launcher) throw new Error(launcher.missing);
    argv = [...launcher.prefix, join(root, platform.loader), '--list', `/${rel}`];
  }
  const out = execFileSync(argv[0] as string, argv.slice(1), { encoding: 'utf8' });
  const libs: string[] = [];
  for (const line of out.split('\n')) {
    const m = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
    if (m?.[1] !== undefined) {
      // qemu names the loader it was given by its host path.
      const path = m[1].startsWith(`${root}/`) ? m[1].slice(root.length) : m[1];
      libs.push(path.slice(1));
    } else if (/=>\s*not found/.test(line)) throw new Error(`${rel}: ${line.trim()}`);
  }
  return libs;
}

/** Maps each path a package installed (as the merged-/usr tree resolves it) to the package. */
function packageOwners(root: string): Map<string, string> {
  const owners = new Map<string, string>();
  const infoDir = join(root, 'var/lib/dpkg/info');
  for (const file of readdirSync(infoDir)
    .filter((f) => f.endsWith('.list'))
    .sort()) {
    const pkg = file.slice(0, -'.list'.length).replace(/:.*$/, '');
    for (const line of readFileSync(join(infoDir, file), 'utf8').split('\n')) {
      if (line === '' || line === '/.') continue;
      const rel = line.slice(1);
      let parent: string;
      try {
        parent = walk(root, dirname(rel)).real;
      } catch {
        continue; // excluded at install (docs, man pages)
      }
      owners.set(posix.join(parent, basename(rel)), pkg);
    }
  }
  return owners;
}

/**
 * Fills `dst` from the Debian tree `src` with the image's contents, plus `extra` (image path →
 * host file, mode 0755) for the executables from dist/. `alsoLoads` are host ELF files loaded at run
 * time (the daemon's extracted addon) whose libraries the image needs too.
 */
export function populateRootfs(
  src: string,
  dst: string,
  extra: Record<string, string>,
  options: { alsoLoads: string[]; platform: ImagePlatform },
): void {
  const { platform } = options;
  const copied = new Set<string>();
  mkdirSync(dst, { recursive: true });
  // The merged-/usr top-level links (bin, sbin, lib, lib64) come along with the first path using them.
  copyPath(src, dst, platform.loader, copied);
  const elves = new Set<string>();
  for (const name of EXECUTABLES) {
    const rel = findExecutable(src, name);
    copyPath(src, dst, rel, copied);
    elves.add(walk(src, rel).real);
  }
  for (const dir of dlopenedDirs(platform)) {
    copyPath(src, dst, dir, copied);
    for (const name of readdirSync(join(src, dir))) if (name.endsWith('.so')) elves.add(posix.join(dir, name));
  }
  for (const elf of [...elves].sort()) {
    if (!isElf(join(src, elf))) throw new Error(`${elf} is not an ELF executable`);
    for (const lib of neededLibraries(src, elf, platform)) copyPath(src, dst, lib, copied);
  }
  // Our own ELF files (the executables, the native addon they extract) are resolved by the same
  // loader from a scratch copy inside the Debian tree.
  for (const file of [...Object.values(extra), ...options.alsoLoads].sort()) {
    const scratch = `tmp/needed-${basename(file)}`;
    copyFileSync(file, join(src, scratch));
    try {
      for (const lib of neededLibraries(src, scratch, platform)) copyPath(src, dst, lib, copied);
    } finally {
      rmSync(join(src, scratch));
    }
  }
  for (const data of DATA_FILES) {
    if (lstatSync(join(src, data), { throwIfNoEntry: false }) !== undefined) copyPath(src, dst, data, copied);
  }
  if (!existsSync(join(dst, 'etc/ssl/certs/ca-certificates.crt'))) throw new Error('the CA bundle is missing');

  const owners = packageOwners(src);
  const packages = new Set<string>();
  for (const path of copied) {
    const pkg = owners.get(path);
    if (pkg !== undefined) packages.add(pkg);
  }
  for (const pkg of [...packages].sort()) {
    const copyright = `usr/share/doc/${pkg}/copyright`;
    if (lstatSync(join(src, copyright), { throwIfNoEntry: false }) === undefined) throw new Error(`${pkg} has no copyright file`);
    copyPath(src, dst, copyright, copied);
  }

  for (const [rel, file] of Object.entries(extra)) {
    mkdirSync(dirname(join(dst, rel)), { recursive: true });
    copyFileSync(file, join(dst, rel));
    chmodSync(join(dst, rel), 0o755);
  }
  // Mount points and the run-time writable places: /tmp for koffi's extracted addon, /run for the
  // xtables lock.
  for (const dir of ['dev', 'proc', 'sys', 'run', 'etc']) mkdirSync(join(dst, dir), { recursive: true, mode: 0o755 });
  mkdirSync(join(dst, 'tmp'), { recursive: true });
  chmodSync(join(dst, 'tmp'), 0o1777);
  mkdirSync(join(dst, 'var'), { recursive: true });
  symlinkSync('/run', join(dst, 'var/run'));
  writeFileSync(
    join(dst, 'etc/passwd'),
    'root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
  );
  writeFileSync(join(dst, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  assertOneArchitecture(dst, platform);
}

/** Every ELF file of the tree is built for the platform: nothing of another architecture slips in. */
function assertOneArchitecture(dir: string, platform: ImagePlatform, rel = ''): void {
  for (const name of readdirSync(join(dir, rel)).sort()) {
    const child = posix.join(rel, name);
    const st = lstatSync(join(dir, child));
    if (st.isDirectory()) assertOneArchitecture(dir, platform, child);
    else if (st.isFile() && st.size >= 20 && isElf(join(dir, child))) {
      const arch = elfArch(join(dir, child));
      if (arch !== platform.arch)
        throw new Error(`${child} in the ${platform.debianArch} image is built for ${arch ?? 'an unknown machine'}`);
    }
  }
}
