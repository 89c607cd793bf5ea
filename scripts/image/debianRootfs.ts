import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { hostArch } from '../../test/support/emulation.ts';
import { DEBIAN_MIRRORS, DEBIAN_PACKAGES, DEBIAN_SUITE } from './imageContents.ts';
import type { ImagePlatform } from './platforms.ts';
import { runWithPrivateBinfmt } from '../../test/support/privateBinfmt.ts';

/** The Debian root filesystem a platform's images are cut from: build/image/debian (this machine's) or debian-<arch>. */
export function debianRootfsDir(root: string, platform: ImagePlatform): string {
  return join(root, platform.arch === hostArch() ? 'build/image/debian' : `build/image/debian-${platform.debianArch}`);
}

/** Builds the platform's Debian tree with mmdebstrap (as root) unless the cached one has the same suite, packages and mirrors. */
export async function debianRootfs(root: string, platform: ImagePlatform): Promise<string> {
  const debianDir = debianRootfsDir(root, platform);
  const stampFile = `${debianDir}.stamp`;
  const stamp = JSON.stringify({ suite: DEBIAN_SUITE, packages: DEBIAN_PACKAGES, mirrors: DEBIAN_MIRRORS, arch: platform.debianArch });
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp && existsSync(debianDir)) return debianDir;
  rmSync(debianDir, { recursive: true, force: true });
  rmSync(stampFile, { force: true });
  mkdirSync(dirname(debianDir), { recursive: true });
  // Root mode: package scripts run chrooted in the new tree (chrootless mode would run them against
  // this machine's own /etc).
  const options = [
    '--mode=root',
    '--variant=essential',
    `--arch=${platform.debianArch}`,
    '--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr',
    `--include=${DEBIAN_PACKAGES.join(',')}`,
    '--dpkgopt=path-exclude=/usr/share/man/*',
    '--dpkgopt=path-exclude=/usr/share/locale/*',
    '--dpkgopt=path-exclude=/usr/share/doc/*',
    '--dpkgopt=path-include=/usr/share/doc/*/copyright',
    '--quiet',
  ];
  const args = [DEBIAN_SUITE, debianDir, ...DEBIAN_MIRRORS];
  if (platform.arch === hostArch()) {
    execFileSync('mmdebstrap', [...options, ...args], { stdio: 'inherit' });
  } else {
    // Another architecture's maintainer scripts run under qemu-user through a binfmt_misc of the
    // command's own (privateBinfmt.ts), which mmdebstrap's own check (arch-test, against the host's
    // registrations) cannot see. Its user namespace owns no network namespace, so sysfs cannot be
    // mounted in the chroot; no package script here reads it.
    await runWithPrivateBinfmt(platform.arch, ['mmdebstrap', ...options, '--skip=check/qemu', '--skip=chroot/mount/sys', ...args]);
  }
  writeFileSync(stampFile, stamp);
  return debianDir;
}
