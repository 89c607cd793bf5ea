import { join } from 'node:path';
import type { Arch } from './emulation.ts';

/**
 * Where one architecture's executables go under a dist (or build) directory: x64's stay at its top
 * level, where the image, the tests and `make up` read them; another architecture's go into
 * `linux-<arch>/` beside them (dist/linux-arm64/istio-cni, dist/linux-arm64/install-cni).
 */
export function archDir(dir: string, arch: Arch): string {
  return arch === 'x64' ? dir : join(dir, `linux-${arch}`);
}

/** The architectures scripts/build.ts builds, the host's first. */
export const BUILT_ARCHES: readonly Arch[] = ['x64', 'arm64'];
