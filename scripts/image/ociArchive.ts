/**
 * Packs one uncompressed layer tar per platform into an OCI image layout inside a tar (the format
 * `ctr images import`, `podman load` and `skopeo copy oci-archive:` read): an image index offering
 * each platform's manifest, named in index.json as a multi-platform image is (a runtime pulls the
 * manifest of its own platform). Every byte is a function of the layers and the arguments: the same
 * inputs give the same digests.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface OciImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env: string[];
  WorkingDir: string;
}

export interface OciPlatform {
  architecture: string;
  variant?: string;
}

export interface OciArchiveOptions {
  /** One image per platform, each an uncompressed, already deterministic tar of its root filesystem. */
  images: { platform: OciPlatform; layerTar: string }[];
  out: string;
  /** name:tag, recorded for containerd (`io.containerd.image.name`) and OCI (`ref.name`, the tag). */
  ref: string;
  config: OciImageConfig;
  /** The image history's `created_by` (default `scripts/image/build.ts`). */
  createdBy?: string;
}

export interface OciArchive {
  indexDigest: string;
  manifests: { platform: OciPlatform; manifestDigest: string; layerSize: number }[];
}

const INDEX = 'application/vnd.oci.image.index.v1+json';
const MANIFEST = 'application/vnd.oci.image.manifest.v1+json';

function sha256File(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

export function writeOciArchive(options: OciArchiveOptions): OciArchive {
  if (options.images.length === 0) throw new Error('an image needs at least one platform');
  const layout = mkdtempSync(join(dirname(options.out), '.oci-layout-'));
  try {
    const blobs = join(layout, 'blobs/sha256');
    mkdirSync(blobs, { recursive: true });
    const putBlob = (bytes: Buffer): { digest: string; size: number } => {
      const hex = createHash('sha256').update(bytes).digest('hex');
      writeFileSync(join(blobs, hex), bytes);
      return { digest: `sha256:${hex}`, size: bytes.length };
    };
    const putJson = (json: unknown) => putBlob(Buffer.from(JSON.stringify(json)));

    const manifests: OciArchive['manifests'] = [];
    const entries: unknown[] = [];
    for (const image of options.images) {
      const diffId = `sha256:${sha256File(image.layerTar)}`;
      // gzip -n: no name or timestamp in the header, so the compressed bytes follow the tar alone.
      const gz = join(layout, 'layer.tar.gz');
      execFileSync('sh', ['-c', 'exec gzip -n -6 -c "$0" > "$1"', image.layerTar, gz]);
      const layerHex = sha256File(gz);
      renameSync(gz, join(blobs, layerHex));
      const layer = { digest: `sha256:${layerHex}`, size: statSync(join(blobs, layerHex)).size };
      const platform = {
        architecture: image.platform.architecture,
        os: 'linux',
        ...(image.platform.variant ? { variant: image.platform.variant } : {}),
      };
      const config = putJson({
        ...platform,
        created: '1970-01-01T00:00:00Z',
        config: options.config,
        rootfs: { type: 'layers', diff_ids: [diffId] },
        history: [{ created: '1970-01-01T00:00:00Z', created_by: options.createdBy ?? 'scripts/image/build.ts' }],
      });
      const manifest = putJson({
        schemaVersion: 2,
        mediaType: MANIFEST,
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
        layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...layer }],
      });
      entries.push({ mediaType: MANIFEST, ...manifest, platform });
      manifests.push({ platform: image.platform, manifestDigest: manifest.digest, layerSize: layer.size });
    }
    const index = putJson({ schemaVersion: 2, mediaType: INDEX, manifests: entries });
    const tag = options.ref.slice(options.ref.lastIndexOf(':') + 1);
    writeFileSync(
      join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: INDEX,
        manifests: [
          {
            mediaType: INDEX,
            ...index,
            annotations: { 'io.containerd.image.name': options.ref, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    writeFileSync(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    deterministicTar(layout, options.out, ['oci-layout', 'index.json', 'blobs']);
    return { indexDigest: index.digest, manifests };
  } finally {
    rmSync(layout, { recursive: true, force: true });
  }
}

/** A tar of `entries` in `dir` whose bytes depend only on the files' paths, contents, modes and links. */
export function deterministicTar(dir: string, out: string, entries: readonly string[] = ['.']): void {
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
    ...entries,
  ]);
}
