import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const REPO_ROOT = resolve(import.meta.dirname, '../../..');
export const RIG_CACHE = process.env.E2E_CACHE ?? join(REPO_ROOT, '.e2e-cache');
export const RIG_BIN = join(RIG_CACHE, 'bin');
/** Debian's reference CNI plugins: the primary network every e2e pod joins. */
export const REFERENCE_PLUGIN_DIR = '/usr/lib/cni';

export type RigBinary =
  | 'etcd'
  | 'kube-apiserver'
  | 'kube-controller-manager'
  | 'kube-scheduler'
  | 'kubelet'
  | 'crictl'
  | 'cnitool'
  | 'helm'
  | 'kubectl'
  | 'pause'
  | 'pause-image.tar';

/** The path of a rig artefact built by `test/e2e/rig/build.sh`; fails naming the fix when it is missing. */
export function rigBinary(name: RigBinary): string {
  const path = join(RIG_BIN, name);
  if (!existsSync(path)) throw new Error(`e2e rig artefact ${path} is missing: run \`make e2e-rig\` first`);
  return path;
}

/** The image reference the locally built pause image is imported under. */
export function pauseImageRef(): string {
  rigBinary('pause-image.tar');
  return readFileSync(join(RIG_BIN, 'pause-image.ref'), 'utf8').trim();
}
