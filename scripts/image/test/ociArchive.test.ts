import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { deterministicTar, writeOciArchive } from '../ociArchive.ts';

const work = mkdtempSync(join(tmpdir(), 'oci-archive-test-'));
after(() => rmSync(work, { recursive: true, force: true }));

function layer(name: string, content: string): string {
  const dir = join(work, name);
  mkdirSync(join(dir, 'etc'), { recursive: true });
  writeFileSync(join(dir, 'etc/arch'), content);
  deterministicTar(dir, `${dir}.tar`);
  return `${dir}.tar`;
}

const images = [
  { platform: { architecture: 'amd64' }, layerTar: layer('amd64', 'x86-64\n') },
  { platform: { architecture: 'arm64', variant: 'v8' }, layerTar: layer('arm64', 'aarch64\n') },
];
const options = { images, ref: 'localhost/x/install-cni:1.2.3', config: { Env: ['PATH=/usr/bin'], WorkingDir: '/' } };
const read = (archive: string, path: string) => execFileSync('tar', ['-xOf', archive, path]);
const json = <T>(archive: string, path: string) => JSON.parse(read(archive, path).toString('utf8')) as T;
const blob = (digest: string) => `blobs/sha256/${digest.slice('sha256:'.length)}`;

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Record<string, string>;
  annotations?: Record<string, string>;
}

test('index.json names one image index that offers each platform, each manifest and config of its own platform', () => {
  const out = join(work, 'a.oci.tar');
  const archive = writeOciArchive({ ...options, out });
  const top = json<{ manifests: Descriptor[] }>(out, 'index.json');
  assert.equal(top.manifests.length, 1);
  const entry = top.manifests[0] as Descriptor;
  assert.equal(entry.mediaType, 'application/vnd.oci.image.index.v1+json');
  assert.equal(entry.digest, archive.indexDigest);
  assert.deepEqual(entry.annotations, { 'io.containerd.image.name': options.ref, 'org.opencontainers.image.ref.name': '1.2.3' });
  const indexBytes = read(out, blob(entry.digest));
  assert.equal(`sha256:${createHash('sha256').update(indexBytes).digest('hex')}`, entry.digest);
  assert.equal(indexBytes.length, entry.size);
  const index = JSON.parse(indexBytes.toString('utf8')) as { manifests: Descriptor[] };
  assert.deepEqual(
    index.manifests.map((m) => m.platform),
    [
      { architecture: 'amd64', os: 'linux' },
      { architecture: 'arm64', os: 'linux', variant: 'v8' },
    ],
  );
  for (const [i, m] of index.manifests.entries()) {
    const manifest = json<{ config: Descriptor; layers: Descriptor[] }>(out, blob(m.digest));
    const config = json<{ architecture: string; variant?: string; rootfs: { diff_ids: string[] } }>(out, blob(manifest.config.digest));
    assert.equal(config.architecture, images[i]?.platform.architecture);
    assert.equal(config.variant, images[i]?.platform.variant);
    const tar = readFileSync(images[i]?.layerTar as string);
    assert.deepEqual(config.rootfs.diff_ids, [`sha256:${createHash('sha256').update(tar).digest('hex')}`]);
    const layerTar = execFileSync('gzip', ['-dc'], { input: read(out, blob(manifest.layers[0]?.digest as string)) });
    assert.ok(layerTar.equals(tar), 'the layer is the platform tar, gzipped');
  }
});

test('the same layers and arguments give the same bytes; another platform order another index', () => {
  const a = join(work, 'b1.oci.tar');
  const b = join(work, 'b2.oci.tar');
  writeOciArchive({ ...options, out: a });
  writeOciArchive({ ...options, out: b });
  assert.ok(readFileSync(a).equals(readFileSync(b)));
  const reversed = writeOciArchive({ ...options, images: [...images].reverse(), out: join(work, 'c.oci.tar') });
  assert.notEqual(reversed.indexDigest, writeOciArchive({ ...options, out: join(work, 'd.oci.tar') }).indexDigest);
});

test('an image without a platform is refused', () => {
  assert.throws(() => writeOciArchive({ ...options, images: [], out: join(work, 'e.oci.tar') }), /at least one platform/);
});
