/**
 * The node image's size per platform, compressed (what a node pulls) and unpacked (what it stores),
 * beside upstream's Go agent packed the same way (scripts/image/buildUpstream.ts: upstream's two
 * static binaries on the same Debian cut, linux/amd64 only, into .bench-cache/ so that
 * dist/image-upstream.oci.tar of `make upstream-image` is left alone).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { REPO_ROOT } from '../test/e2e/support/rigPaths.ts';
import { BENCH_CACHE } from './upstreamPeer.ts';

export interface PlatformSize {
  image: 'ours' | 'upstream';
  platform: string;
  compressedBytes: number;
  unpackedBytes: number;
}

interface Descriptor {
  digest: string;
  size: number;
  platform?: { architecture: string; os: string; variant?: string };
}

const blob = (digest: string) => `blobs/sha256/${digest.slice('sha256:'.length)}`;

/** Each platform of an OCI archive `make image` writes: its layers' compressed and uncompressed bytes. */
export function archiveSizes(archive: string, image: PlatformSize['image']): PlatformSize[] {
  const read = (path: string) => execFileSync('tar', ['-xOf', archive, path], { maxBuffer: 2 ** 31 });
  const json = <T>(path: string) => JSON.parse(read(path).toString('utf8')) as T;
  const top = json<{ manifests: Descriptor[] }>('index.json');
  const sizes: PlatformSize[] = [];
  for (const entry of top.manifests) {
    for (const m of json<{ manifests: Descriptor[] }>(blob(entry.digest)).manifests) {
      const manifest = json<{ layers: Descriptor[] }>(blob(m.digest));
      let compressedBytes = 0;
      let unpackedBytes = 0;
      for (const layer of manifest.layers) {
        compressedBytes += layer.size;
        unpackedBytes += gunzipSync(read(blob(layer.digest))).length;
      }
      const p = m.platform;
      sizes.push({
        image,
        platform: p ? [p.os, p.architecture, ...(p.variant ? [p.variant] : [])].join('/') : '?',
        compressedBytes,
        unpackedBytes,
      });
    }
  }
  return sizes;
}

export function benchImageSizes(): { sizes: PlatformSize[]; missing: string[] } {
  const missing: string[] = [];
  const sizes: PlatformSize[] = [];
  const ours = join(REPO_ROOT, 'dist/image.oci.tar');
  if (existsSync(ours)) sizes.push(...archiveSizes(ours, 'ours'));
  else missing.push('dist/image.oci.tar (make image)');
  const upstreamBin = join(BENCH_CACHE, 'bin');
  const upstreamArchive = join(BENCH_CACHE, 'image-upstream.oci.tar');
  if (existsSync(join(upstreamBin, 'install-cni')) && existsSync(join(upstreamBin, 'istio-cni'))) {
    execFileSync(
      process.execPath,
      [join(REPO_ROOT, 'scripts/image/buildUpstream.ts'), 'localhost/bench/upstream-install-cni:bench', upstreamBin, upstreamArchive],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    sizes.push(...archiveSizes(upstreamArchive, 'upstream'));
  } else missing.push(`upstream's binaries in ${upstreamBin} (make bench-peer)`);
  return { sizes, missing };
}

export function printImageSizes(result: { sizes: PlatformSize[]; missing: string[] }): void {
  const mib = (n: number) => (n / 1048576).toFixed(1);
  const upstream = result.sizes.find((s) => s.image === 'upstream');
  console.log('\n## Node image per platform (compressed: what a node pulls; unpacked: what it stores)\n');
  console.log('| image | platform | compressed MiB | unpacked MiB | compressed / upstream amd64 |');
  console.log('|---|---|---:|---:|---:|');
  for (const s of result.sizes) {
    const ratio = upstream ? (s.compressedBytes / upstream.compressedBytes).toFixed(2) : '–';
    console.log(`| ${s.image} | ${s.platform} | ${mib(s.compressedBytes)} | ${mib(s.unpackedBytes)} | ${ratio} |`);
  }
  for (const m of result.missing) console.log(`(not measured: ${m} missing)`);
}
