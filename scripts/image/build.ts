/**
 * Builds the node image offline for linux/amd64 and linux/arm64: no registry, no Docker daemon.
 *
 * 1. Per platform, a Debian root filesystem of its architecture from Debian's mirror (mmdebstrap;
 *    the arm64 one runs its package scripts under qemu-user, privateBinfmt.ts), cached in
 *    build/image/debian and build/image/debian-arm64 until the package list or suite changes.
 * 2. Each cut down to what the daemon executes (see `imageContents.ts`): those executables, the
 *    libraries the root filesystem's own loader resolves for them, iptables' dlopen'ed extensions,
 *    the CA bundle and the packages' copyright files, plus the platform's two executables from dist/
 *    or dist/linux-arm64/; every ELF file checked to be of that architecture.
 * 3. Packed as one OCI image layout in a tar (`dist/image.oci.tar`), an image index offering both
 *    platforms, that `ctr images import`, `podman load` and `skopeo` read. Fixed mtimes, sorted names,
 *    numeric owners and `gzip -n` make the same inputs give the same digest.
 *
 * Usage: node scripts/image/build.ts <image ref> (e.g. localhost/istio-cni/install-cni:0.1.0).
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { packImage } from './packImage.ts';
import { IMAGE_PLATFORMS, platformName } from './platforms.ts';

const root = resolve(import.meta.dirname, '../..');

/** koffi's native module for each platform: embedded in install-cni, extracted to /tmp at run time (see scripts/build.ts). */
const KOFFI: Record<string, string> = {
  x64: 'node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node',
  arm64: 'toolchain/linux-arm64/node_modules/@koromix/koffi-linux-arm64/linux_arm64/koffi.node',
};

async function main(): Promise<void> {
  const ref = process.argv[2];
  if (ref === undefined || ref.lastIndexOf(':') <= ref.lastIndexOf('/')) {
    throw new Error('usage: node scripts/image/build.ts <name:tag>');
  }
  const platforms = IMAGE_PLATFORMS.map((platform) => {
    const exe = (name: string) => join(root, platform.distDir, name);
    for (const name of ['istio-cni', 'install-cni']) {
      if (!existsSync(exe(name)))
        throw new Error(`${platform.distDir}/${name} (${platformName(platform)}) is missing: run make build first`);
    }
    return {
      platform,
      executables: { 'usr/local/bin/install-cni': exe('install-cni'), 'opt/cni/bin/istio-cni': exe('istio-cni') },
      alsoLoads: [join(root, KOFFI[platform.arch] as string)],
    };
  });
  await packImage({
    root,
    work: join(root, 'build/image'),
    platforms,
    ref,
    output: join(root, 'dist/image.oci.tar'),
    config: {
      Entrypoint: ['/usr/local/bin/install-cni'],
      Env: ['PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin'],
      WorkingDir: '/',
    },
  });
}

await main();
