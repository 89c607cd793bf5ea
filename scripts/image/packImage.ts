import { mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { debianRootfs, debianRootfsDir } from './debianRootfs.ts';
import { populateRootfs } from './imageContents.ts';
import { deterministicTar, type OciArchiveOptions, writeOciArchive } from './ociArchive.ts';

export interface PackImageOptions {
  /** The checkout (its build/image/debian is the Debian tree). */
  root: string;
  /** Scratch directory for the cut root filesystem and its tar. */
  work: string;
  /** Image path → host file, mode 0755 (the agent's executables). */
  executables: Record<string, string>;
  /** Host ELF files loaded at run time whose libraries the image needs too. */
  alsoLoads: string[];
  ref: string;
  output: string;
  config: OciArchiveOptions['config'];
  createdBy?: string;
}

/** The Debian tree cut down to the tools the agent runs (`imageContents.ts`), plus `executables`, as an OCI archive. */
export function packImage(o: PackImageOptions): void {
  const rootfsDir = join(o.work, 'rootfs');
  const layerTar = join(o.work, 'rootfs.tar');
  mkdirSync(o.work, { recursive: true });
  mkdirSync(dirname(o.output), { recursive: true });
  const started = Date.now();
  debianRootfs(o.root);
  rmSync(rootfsDir, { recursive: true, force: true });
  populateRootfs(debianRootfsDir(o.root), rootfsDir, o.executables, { alsoLoads: o.alsoLoads });
  deterministicTar(rootfsDir, layerTar);
  const staging = `${o.output}.tmp`;
  const image = writeOciArchive({
    layerTar,
    out: staging,
    ref: o.ref,
    config: o.config,
    ...(o.createdBy ? { createdBy: o.createdBy } : {}),
  });
  renameSync(staging, o.output);
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  console.log(
    `built ${o.output} (${o.ref}) in ${((Date.now() - started) / 1000).toFixed(1)} s: ` +
      `root filesystem ${mib(statSync(layerTar).size)}, layer ${mib(image.layerSize)} compressed, ` +
      `archive ${mib(statSync(o.output).size)}, manifest ${image.manifestDigest}`,
  );
}
