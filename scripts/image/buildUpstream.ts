/**
 * Packs upstream Istio's Go agent (built by bench/upstream/build.sh) into an offline image laid out
 * as upstream's own (`cni/deployments/kubernetes/Dockerfile.install-cni`): `/usr/local/bin/install-cni`,
 * `/opt/cni/bin/istio-cni`, PATH ending in /opt/cni/bin, WORKDIR /opt/cni/bin, CMD install-cni.
 * The tools come from the same Debian cut as our image (`imageContents.ts`: the iptables family,
 * nft, ipset, ip, nsenter, ...), a superset of what upstream's code execs (iptables*, nft, nsenter).
 * Both Go binaries are static, so no library is added for them.
 *
 * Usage: node scripts/image/buildUpstream.ts <name:tag> <dir with istio-cni and install-cni> [archive]
 * Writes dist/image-upstream.oci.tar, or the archive named.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { hostArch } from '../../test/support/emulation.ts';
import { packImage } from './packImage.ts';
import { imagePlatform } from './platforms.ts';

const root = resolve(import.meta.dirname, '../..');

async function main(): Promise<void> {
  const [ref, binDir, output] = process.argv.slice(2);
  if (ref === undefined || binDir === undefined || ref.lastIndexOf(':') <= ref.lastIndexOf('/')) {
    throw new Error('usage: node scripts/image/buildUpstream.ts <name:tag> <bin dir> [archive]');
  }
  for (const exe of ['istio-cni', 'install-cni']) {
    if (!existsSync(join(binDir, exe))) throw new Error(`${join(binDir, exe)} is missing: run bench/upstream/build.sh first`);
  }
  // This machine's platform only: bench/upstream/build.sh builds upstream's binaries for it.
  await packImage({
    root,
    work: join(root, 'build/image-upstream'),
    platforms: [
      {
        platform: imagePlatform(hostArch()),
        executables: { 'usr/local/bin/install-cni': join(binDir, 'install-cni'), 'opt/cni/bin/istio-cni': join(binDir, 'istio-cni') },
        alsoLoads: [],
      },
    ],
    ref,
    output: output === undefined ? join(root, 'dist/image-upstream.oci.tar') : resolve(output),
    config: {
      Cmd: ['/usr/local/bin/install-cni'],
      Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin'],
      WorkingDir: '/opt/cni/bin',
    },
    createdBy: 'scripts/image/buildUpstream.ts',
  });
}

await main();
