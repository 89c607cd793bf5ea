import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { DEBIAN_MIRRORS, DEBIAN_PACKAGES, DEBIAN_SUITE } from './imageContents.ts';

/** The Debian root filesystem both images are cut from: build/image/debian of the checkout. */
export function debianRootfsDir(root: string): string {
  return join(root, 'build/image/debian');
}

/** Builds the Debian tree with mmdebstrap (as root) unless the cached one has the same suite, packages and mirrors. */
export function debianRootfs(root: string): void {
  const debianDir = debianRootfsDir(root);
  const stampFile = join(root, 'build/image/debian.stamp');
  const stamp = JSON.stringify({ suite: DEBIAN_SUITE, packages: DEBIAN_PACKAGES, mirrors: DEBIAN_MIRRORS });
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp && existsSync(debianDir)) return;
  rmSync(debianDir, { recursive: true, force: true });
  rmSync(stampFile, { force: true });
  mkdirSync(dirname(debianDir), { recursive: true });
  // Root mode: package scripts run chrooted in the new tree (chrootless mode would run them against
  // this machine's own /etc).
  execFileSync(
    'mmdebstrap',
    [
      '--mode=root',
      '--variant=essential',
      '--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr',
      `--include=${DEBIAN_PACKAGES.join(',')}`,
      '--dpkgopt=path-exclude=/usr/share/man/*',
      '--dpkgopt=path-exclude=/usr/share/locale/*',
      '--dpkgopt=path-exclude=/usr/share/doc/*',
      '--dpkgopt=path-include=/usr/share/doc/*/copyright',
      '--quiet',
      DEBIAN_SUITE,
      debianDir,
      ...DEBIAN_MIRRORS,
    ],
    { stdio: 'inherit' },
  );
  writeFileSync(stampFile, stamp);
}
