/**
 * Builds the node image offline: no registry, no Docker daemon.
 *
 * 1. A Debian root filesystem from Debian's mirror (mmdebstrap, cached in build/image/debian until the
 *    package list or suite changes).
 * 2. Cut down to what the daemon executes (see `imageContents.ts`): those executables, the
 *    libraries the root filesystem's own loader resolves for them, iptables' dlopen'ed extensions,
 *    the CA bundle and the packages' copyright files, plus the two executables from dist/.
 * 3. Packed as an OCI image layout in a tar (`dist/image.oci.tar`) that `ctr images import`,
 *    `podman load` and `skopeo` read. Fixed mtimes, sorted names, numeric owners and `gzip -n` make
 *    the same inputs give the same digest.
 *
 * Usage: node scripts/image/build.ts <image ref> (e.g. localhost/istio-cni/install-cni:0.1.0).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEBIAN_MIRRORS, DEBIAN_PACKAGES, DEBIAN_SUITE, populateRootfs } from './imageContents.ts';
import { writeOciArchive } from './ociArchive.ts';

const root = resolve(import.meta.dirname, '../..');
const work = join(root, 'build/image');
const debianDir = join(work, 'debian');
const rootfsDir = join(work, 'rootfs');
const layerTar = join(work, 'rootfs.tar');
const output = join(root, 'dist/image.oci.tar');

function debianRootfs(): void {
  const stampFile = join(work, 'debian.stamp');
  const stamp = JSON.stringify({ suite: DEBIAN_SUITE, packages: DEBIAN_PACKAGES, mirrors: DEBIAN_MIRRORS });
  if (existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp && existsSync(debianDir)) return;
  rmSync(debianDir, { recursive: true, force: true });
  rmSync(stampFile, { force: true });
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

/** A tar of `dir` whose bytes depend only on the files' paths, contents, modes and links. */
function deterministicTar(dir: string, out: string): void {
  execFileSync('tar', [
    '--create',
    '--file',
    out,
    '--directory',
    dir,
    '--format=gnu',
    '--sort=name',
    '--mtime=@0',
    '--owner=0',
    '--group=0',
    '--numeric-owner',
    '.',
  ]);
}

function main(): void {
  const ref = process.argv[2];
  if (ref === undefined || ref.lastIndexOf(':') <= ref.lastIndexOf('/')) {
    throw new Error('usage: node scripts/image/build.ts <name:tag>');
  }
  for (const exe of ['istio-cni', 'install-cni']) {
    if (!existsSync(join(root, 'dist', exe))) throw new Error(`dist/${exe} is missing: run make build first`);
  }
  mkdirSync(work, { recursive: true });
  const started = Date.now();
  debianRootfs();
  rmSync(rootfsDir, { recursive: true, force: true });
  populateRootfs(
    debianDir,
    rootfsDir,
    { 'usr/local/bin/install-cni': join(root, 'dist/install-cni'), 'opt/cni/bin/istio-cni': join(root, 'dist/istio-cni') },
    // Embedded in install-cni and extracted to /tmp at run time (see scripts/build.ts).
    { alsoLoads: [join(root, 'node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node')] },
  );
  deterministicTar(rootfsDir, layerTar);
  const staging = `${output}.tmp`;
  const image = writeOciArchive({
    layerTar,
    out: staging,
    ref,
    config: {
      Entrypoint: ['/usr/local/bin/install-cni'],
      Env: ['PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin'],
      WorkingDir: '/',
    },
  });
  renameSync(staging, output);
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  console.log(
    `built ${output} (${ref}) in ${((Date.now() - started) / 1000).toFixed(1)} s: ` +
      `root filesystem ${mib(statSync(layerTar).size)}, layer ${mib(image.layerSize)} compressed, ` +
      `archive ${mib(statSync(output).size)}, manifest ${image.manifestDigest}`,
  );
}

main();
