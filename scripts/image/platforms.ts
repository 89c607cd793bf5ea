import type { Arch } from '../../test/support/emulation.ts';

/** What differs between the image's platforms: names in each world, and where the ELF loader lives. */
export interface ImagePlatform {
  /** Node's name (`process.arch`), as the build and emulation.ts use it. */
  arch: Arch;
  /** The OCI platform (image index and config). */
  oci: { architecture: 'amd64' | 'arm64'; variant?: 'v8' };
  /** Debian's architecture (mmdebstrap `--arch`). */
  debianArch: 'amd64' | 'arm64';
  /** Debian's multiarch directory under /usr/lib. */
  multiarch: string;
  /** The ELF interpreter every dynamically linked executable names (PT_INTERP), relative to the root. */
  loader: string;
  /** Where the executables come from: dist/ and dist/linux-arm64/ (scripts/build.ts). */
  distDir: string;
}

export const IMAGE_PLATFORMS: readonly ImagePlatform[] = [
  {
    arch: 'x64',
    oci: { architecture: 'amd64' },
    debianArch: 'amd64',
    multiarch: 'x86_64-linux-gnu',
    loader: 'lib64/ld-linux-x86-64.so.2',
    distDir: 'dist',
  },
  {
    arch: 'arm64',
    oci: { architecture: 'arm64', variant: 'v8' },
    debianArch: 'arm64',
    multiarch: 'aarch64-linux-gnu',
    loader: 'lib/ld-linux-aarch64.so.1',
    distDir: 'dist/linux-arm64',
  },
];

export function imagePlatform(arch: Arch): ImagePlatform {
  const platform = IMAGE_PLATFORMS.find((p) => p.arch === arch);
  if (platform === undefined) throw new Error(`no image platform for ${arch}`);
  return platform;
}

/** `linux/amd64`, `linux/arm64/v8`: how an OCI platform is written. */
export function platformName(platform: ImagePlatform): string {
  return ['linux', platform.oci.architecture, ...(platform.oci.variant ? [platform.oci.variant] : [])].join('/');
}
