import { mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { debianRootfs } from './debianRootfs.ts';
import { populateRootfs } from './imageContents.ts';
import { deterministicTar, type OciArchiveOptions, writeOciArchive } from './ociArchive.ts';
import { type ImagePlatform, platformName } from './platforms.ts';

export interface PlatformContents {
  platform: ImagePlatform;
  /** Image path → host file, mode 0755 (the agent's executables for this platform). */
  executables: Record<string, string>;
  /** Host ELF files loaded at run time whose libraries the image needs too. */
  alsoLoads: string[];
}

export interface PackImageOptions {
  /** The checkout (its build/image/debian* are the Debian trees). */
  root: string;
  /** Scratch directory for the cut root filesystems and their tars. */
  work: string;
  platforms: PlatformContents[];
  ref: string;
  output: string;
  config: OciArchiveOptions['config'];
  createdBy?: string;
}

/** Where the root filesystem tar of a platform is left (the Dockerfile adds it). */
export function rootfsTar(work: string, platform: ImagePlatform): string {
  return join(work, `rootfs-${platform.oci.architecture}.tar`);
}

/** Each platform's Debian tree cut down to the tools the agent runs (`imageContents.ts`), plus its executables, as one OCI archive. */
export async function packImage(o: PackImageOptions): Promise<void> {
  mkdirSync(o.work, { recursive: true });
  mkdirSync(dirname(o.output), { recursive: true });
  const started = Date.now();
  const images: OciArchiveOptions['images'] = [];
  for (const { platform, executables, alsoLoads } of o.platforms) {
    const debianDir = await debianRootfs(o.root, platform);
    const rootfsDir = join(o.work, `rootfs-${platform.oci.architecture}`);
    rmSync(rootfsDir, { recursive: true, force: true });
    populateRootfs(debianDir, rootfsDir, executables, { alsoLoads, platform });
    deterministicTar(rootfsDir, rootfsTar(o.work, platform));
    images.push({ platform: platform.oci, layerTar: rootfsTar(o.work, platform) });
  }
  const staging = `${o.output}.tmp`;
  const archive = writeOciArchive({
    images,
    out: staging,
    ref: o.ref,
    config: o.config,
    ...(o.createdBy ? { createdBy: o.createdBy } : {}),
  });
  renameSync(staging, o.output);
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  const sizes = o.platforms.map(({ platform }, i) => {
    const manifest = archive.manifests[i];
    return `${platformName(platform)} root filesystem ${mib(statSync(rootfsTar(o.work, platform)).size)}, layer ${mib(manifest?.layerSize ?? 0)} compressed`;
  });
  console.log(
    `built ${o.output} (${o.ref}) in ${((Date.now() - started) / 1000).toFixed(1)} s: ${sizes.join('; ')}; ` +
      `archive ${mib(statSync(o.output).size)}, index ${archive.indexDigest}`,
  );
}
