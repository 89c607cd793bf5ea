import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCommand } from '../support/runCommand.ts';

export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  User?: string;
}

const REPRODUCIBLE_TAR = ['tar', '--sort=name', '--owner=0', '--group=0', '--numeric-owner', '--mtime=@0'];

/**
 * Packs rootfs as a one-layer OCI image archive named ref, for `ctr images import` (no registry is
 * reachable). The same layout `test/e2e/rig/build.sh` gives the pause image.
 */
export async function writeOneLayerImage(rootfs: string, ref: string, config: ImageConfig, tarPath: string): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'istio-cni-oci-'));
  try {
    const blobs = join(work, 'oci/blobs/sha256');
    mkdirSync(blobs, { recursive: true });
    const layer = join(work, 'layer.tar');
    await runCommand([...REPRODUCIBLE_TAR, '-C', rootfs, '-cf', layer, '.'], { timeoutMs: 300_000 });
    const layerDigest = createHash('sha256').update(readFileSync(layer)).digest('hex');
    const layerSize = statSync(layer).size;
    renameSync(layer, join(blobs, layerDigest));
    const blob = (json: unknown): { digest: string; size: number } => {
      const text = JSON.stringify(json);
      const digest = createHash('sha256').update(text).digest('hex');
      writeFileSync(join(blobs, digest), text);
      return { digest: `sha256:${digest}`, size: Buffer.byteLength(text) };
    };
    const configBlob = blob({
      architecture: 'amd64',
      os: 'linux',
      config,
      rootfs: { type: 'layers', diff_ids: [`sha256:${layerDigest}`] },
    });
    const manifest = blob({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...configBlob },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', digest: `sha256:${layerDigest}`, size: layerSize }],
    });
    const tag = ref.slice(ref.lastIndexOf(':') + 1);
    writeFileSync(
      join(work, 'oci/index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [
          {
            mediaType: 'application/vnd.oci.image.manifest.v1+json',
            ...manifest,
            platform: { architecture: 'amd64', os: 'linux' },
            annotations: { 'io.containerd.image.name': ref, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    writeFileSync(join(work, 'oci/oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    await runCommand([...REPRODUCIBLE_TAR, '-C', join(work, 'oci'), '-cf', tarPath, 'oci-layout', 'index.json', 'blobs'], {
      timeoutMs: 300_000,
    });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

export const BUSYBOX = '/bin/busybox';

/** Debian's busybox-static as a one-layer workload image (`sh`, `nc`, `sleep`, `wget`, … as applet links). */
export async function writeBusyboxImage(ref: string, tarPath: string): Promise<void> {
  const rootfs = mkdtempSync(join(tmpdir(), 'istio-cni-busybox-'));
  try {
    mkdirSync(join(rootfs, 'bin'));
    mkdirSync(join(rootfs, 'tmp'), { mode: 0o1777 });
    writeFileSync(join(rootfs, 'bin/busybox'), readFileSync(BUSYBOX), { mode: 0o755 });
    const { stdout } = await runCommand([BUSYBOX, '--list']);
    for (const applet of stdout.split('\n').filter((a) => /^[a-z0-9_.[-]+$/.test(a) && a !== 'busybox')) {
      symlinkSync('busybox', join(rootfs, 'bin', applet));
    }
    await writeOneLayerImage(rootfs, ref, { Env: ['PATH=/bin'], Cmd: ['sh'] }, tarPath);
  } finally {
    rmSync(rootfs, { recursive: true, force: true });
  }
}
