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
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { packImage } from './packImage.ts';

const root = resolve(import.meta.dirname, '../..');

function main(): void {
  const ref = process.argv[2];
  if (ref === undefined || ref.lastIndexOf(':') <= ref.lastIndexOf('/')) {
    throw new Error('usage: node scripts/image/build.ts <name:tag>');
  }
  for (const exe of ['istio-cni', 'install-cni']) {
    if (!existsSync(join(root, 'dist', exe))) throw new Error(`dist/${exe} is missing: run make build first`);
  }
  packImage({
    root,
    work: join(root, 'build/image'),
    executables: { 'usr/local/bin/install-cni': join(root, 'dist/install-cni'), 'opt/cni/bin/istio-cni': join(root, 'dist/istio-cni') },
    // Embedded in install-cni and extracted to /tmp at run time (see scripts/build.ts).
    alsoLoads: [join(root, 'node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node')],
    ref,
    output: join(root, 'dist/image.oci.tar'),
    config: {
      Entrypoint: ['/usr/local/bin/install-cni'],
      Env: ['PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin'],
      WorkingDir: '/',
    },
  });
}

main();
