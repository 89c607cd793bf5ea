import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const REPO_ROOT = resolve(import.meta.dirname, '../../..');
export const RIG_CACHE = process.env.E2E_CACHE ?? join(REPO_ROOT, '.e2e-cache');
export const RIG_BIN = join(RIG_CACHE, 'bin');
/** The reference CNI plugins the rig builds (`github.com/containernetworking/plugins`): the primary network every e2e pod joins. */
export const REFERENCE_PLUGIN_DIR = join(RIG_BIN, 'cni');

export type RigBinary =
  | 'containerd'
  | 'containerd-shim-runc-v2'
  | 'ctr'
  | 'runc'
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

/**
 * The Kubernetes version the rig builds (`KUBERNETES_VERSION` in `test/e2e/rig/build.sh`), e.g. `v1.34.12`:
 * the version its API server reports.
 */
export function rigKubernetesVersion(): string {
  const script = readFileSync(join(REPO_ROOT, 'test/e2e/rig/build.sh'), 'utf8');
  const version = /^KUBERNETES_VERSION="(v[0-9][^"]*)"$/m.exec(script)?.[1];
  if (version === undefined) throw new Error('test/e2e/rig/build.sh sets no KUBERNETES_VERSION="v…"');
  return version;
}

/** The image reference the locally built pause image is imported under. */
export function pauseImageRef(): string {
  rigBinary('pause-image.tar');
  return readFileSync(join(RIG_BIN, 'pause-image.ref'), 'utf8').trim();
}

/**
 * The environment a rig containerd runs with: the rig's bin dir first on PATH, so the shim it
 * starts (`containerd-shim-runc-v2`, found on PATH) and the runc that shim runs are the rig's, never
 * a distribution's that happens to be installed.
 */
export function rigRuntimePath(): string {
  return [RIG_BIN, process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'].join(':');
}
