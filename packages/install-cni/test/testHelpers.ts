import { mkdtemp, rm, copyFile, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createJsonLogger, type Logger } from '@istio-cni/handoff';
import type { CniConfigSettings } from '../src/installer/cniConfigSettings.ts';
import { UPSTREAM_TESTDATA } from '../../../test/support/upstreamTestdata.ts';
import type { PluginConfig } from '@istio-cni/handoff';

export const UPSTREAM = join(UPSTREAM_TESTDATA, 'cni');
export const INSTALL_TESTDATA = join(UPSTREAM, 'pkg/install/testdata');
export const CNI_TESTDATA = join(UPSTREAM, 'test/testdata');

export async function tempDir(t: { after(fn: () => unknown): void }, prefix = 'install-cni-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export async function seed(dir: string, files: Record<string, string>, from = INSTALL_TESTDATA): Promise<void> {
  for (const [name, src] of Object.entries(files)) await copyFile(join(from, src), join(dir, name));
}

export function trimmed(s: string): string {
  return s.trim();
}

export async function fixture(path: string): Promise<string> {
  return readFile(path, 'utf8');
}

/** Plugin settings of the `cni/pkg/install` tests (testdata/upstream/inputs.md §5.4). */
export const INSTALL_TEST_PLUGIN: PluginConfig = {
  pluginLogLevel: 'debug',
  cniAgentRunDir: '/path/to/kubeconfig',
  ambientEnabled: false,
  enablementSelectors: [],
  excludeNamespaces: [],
  podNamespace: 'my-namespace',
  nativeNftables: false,
  enableAmbientDetectionRetry: false,
  forceIptablesBinary: '',
};

export function cniSettings(dir: string, over: Partial<CniConfigSettings> = {}, plugin: Partial<PluginConfig> = {}): CniConfigSettings {
  return {
    mountedCniNetDir: dir,
    cniConfName: '',
    chainedCniPlugin: true,
    owned: false,
    ownedFilename: '02-istio-conf.conflist',
    cniConfGroupRead: false,
    plugin: { ...INSTALL_TEST_PLUGIN, ...plugin },
    ...over,
  };
}

export interface CapturedLog {
  logger: Logger;
  lines: Record<string, unknown>[];
}

export function captureLogger(): CapturedLog {
  const lines: Record<string, unknown>[] = [];
  const logger = createJsonLogger({ scope: 'test', threshold: 'debug', sink: (l) => lines.push(JSON.parse(l) as Record<string, unknown>) });
  return { logger, lines };
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function writeText(path: string, text: string): Promise<void> {
  await writeFile(path, text);
}

import { chmod, mkdir } from 'node:fs/promises';
import type { Installer, InstallerSettings } from '../src/installer/installer.ts';

export interface ScratchHost {
  root: string;
  netDir: string;
  binDir: string;
  saDir: string;
  runDir: string;
}

/** A scratch "host root" with the directories the installer touches. */
export async function scratchHost(t: { after(fn: () => unknown): void }): Promise<ScratchHost> {
  const root = await tempDir(t, 'install-cni-host-');
  const host = {
    root,
    netDir: join(root, 'etc/cni/net.d'),
    binDir: join(root, 'opt/cni/bin'),
    saDir: join(root, 'sa'),
    runDir: join(root, 'run'),
  };
  for (const d of [host.netDir, host.binDir, host.saDir, host.runDir]) await mkdir(d, { recursive: true });
  for (const f of ['ca.crt', 'namespace', 'token']) await copyFile(join(CNI_TESTDATA, 'k8s_svcacct', f), join(host.saDir, f));
  return host;
}

/**
 * A scratch host whose installer, once started, is stopped before the host is removed: after-hooks
 * run in registration order, and removing the tree under a running installer races its re-copy of
 * the binaries it watches (rmdir fails with ENOTEMPTY and the installer is never stopped).
 */
export async function hostForRun(t: { after(fn: () => unknown): void }) {
  const removeHost: (() => unknown)[] = [];
  const controller = new AbortController();
  let running: Promise<void> | undefined;
  t.after(async () => {
    controller.abort();
    await running?.catch(() => undefined);
    for (const remove of removeHost) await remove();
  });
  const host = await scratchHost({ after: (fn) => removeHost.push(fn) });
  const run = (installer: Installer): Promise<void> => {
    running = installer.run(controller.signal);
    return running;
  };
  return { host, controller, run };
}

/** Installer settings of the `cni/test` harness (testdata/upstream/inputs.md §5.9) on a scratch host. */
export function cniTestSettings(
  host: ScratchHost,
  over: { chained?: boolean; confName?: string; binSource?: string } = {},
): InstallerSettings {
  const chained = over.chained ?? true;
  return {
    cniBinSourceDir: over.binSource ?? join(CNI_TESTDATA, 'bindir'),
    cniBinTargetDirs: [host.binDir],
    mountedCniNetDir: host.netDir,
    cniAgentRunDir: host.runDir,
    serviceAccountDir: host.saDir,
    kubeconfigMode: 0o600,
    kubeCaFile: join(host.saDir, 'ca.crt'),
    skipTlsVerify: false,
    k8sServiceProtocol: 'https',
    k8sServiceHost: '10.110.0.1',
    k8sServicePort: '443',
    cni: {
      mountedCniNetDir: host.netDir,
      cniConfName: over.confName ?? '',
      chainedCniPlugin: chained,
      owned: false,
      ownedFilename: '02-istio-cni.conflist',
      cniConfGroupRead: false,
      plugin: {
        pluginLogLevel: 'debug',
        // The goldens carry the harness's run dir; the kubeconfig itself goes to the scratch run dir.
        cniAgentRunDir: '/tmp',
        ambientEnabled: false,
        enablementSelectors: [],
        excludeNamespaces: ['istio-system'],
        podNamespace: '',
        nativeNftables: false,
        enableAmbientDetectionRetry: false,
        forceIptablesBinary: '',
      },
    },
  };
}

export async function seedOrdered(dir: string, names: string[], firstPriority = 0): Promise<void> {
  for (const [i, name] of names.entries()) {
    const dst = join(dir, `${String(firstPriority + i).padStart(2, '0')}-${name}`);
    await copyFile(join(CNI_TESTDATA, 'pre', name), dst);
    await chmod(dst, 0o644);
  }
}

/** The daemon's environment on a scratch host, as the DaemonSet would give it. */
export function daemonTestEnv(host: ScratchHost, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CNI_BIN_SOURCE_DIR: join(CNI_TESTDATA, 'bindir'),
    CNI_BIN_TARGET_DIRS: host.binDir,
    MOUNTED_CNI_NET_DIR: host.netDir,
    SERVICE_ACCOUNT_DIR: host.saDir,
    CNI_AGENT_RUN_DIR: host.runDir,
    // Loopback with nothing listening: the agent's API calls are refused at once, and no test
    // ever sends traffic off this machine.
    KUBERNETES_SERVICE_HOST: '127.0.0.1',
    KUBERNETES_SERVICE_PORT: '9',
    READINESS_PORT: '0',
    ...extra,
  };
}
