import { freePort } from './freePort.ts';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { emulationSkip, launchArgv } from './emulation.ts';
import { type LogEntry, watchDaemonLog } from './watchDaemonLog.ts';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');
/**
 * The executables under test: `dist/`, or another build's directory (ISTIO_CNI_DIST: for comparing
 * builds, and dist/linux-arm64 for the arm64 tier, run under qemu-user: emulation.ts).
 */
export const DIST = process.env.ISTIO_CNI_DIST ? resolve(process.env.ISTIO_CNI_DIST) : join(REPO_ROOT, 'dist');
export const PLUGIN = join(DIST, 'istio-cni');
export const DAEMON = join(DIST, 'install-cni');
/** The tests' skip reason when the executables under test are another architecture's and its emulator is missing. */
export const EMULATION_SKIP: string | false = emulationSkip(PLUGIN) || emulationSkip(DAEMON);

/** The node's primary network before istio-cni is chained in (Debian's reference plugins). */
export const PRIMARY_CONFLIST = {
  cniVersion: '1.0.0',
  name: 'k8s-pod-network',
  plugins: [
    { type: 'bridge', bridge: 'cni0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet: '10.244.0.0/24' } },
    { type: 'portmap', capabilities: { portMappings: true } },
  ],
};

/** A scratch "host root": the directories the DaemonSet mounts from the node, in a temp dir. */
export interface HostRoot {
  dir: string;
  binSource: string;
  binTarget: string;
  netDir: string;
  runDir: string;
  serviceAccountDir: string;
  remove(): void;
}

export function makeHostRoot(): HostRoot {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-host-'));
  const root: HostRoot = {
    dir,
    binSource: join(dir, 'image/opt/cni/bin'),
    binTarget: join(dir, 'host/opt/cni/bin'),
    netDir: join(dir, 'host/etc/cni/net.d'),
    runDir: join(dir, 'var/run/istio-cni'),
    serviceAccountDir: join(dir, 'serviceaccount'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
  for (const d of [root.binSource, root.binTarget, root.netDir, root.serviceAccountDir]) mkdirSync(d, { recursive: true });
  copyFileSync(PLUGIN, join(root.binSource, 'istio-cni'));
  writeFileSync(join(root.serviceAccountDir, 'token'), 'test-token');
  writeFileSync(join(root.serviceAccountDir, 'ca.crt'), '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  writeFileSync(join(root.serviceAccountDir, 'namespace'), 'istio-system');
  writeFileSync(join(root.netDir, '10-primary.conflist'), JSON.stringify(PRIMARY_CONFLIST, null, 2));
  return root;
}

export { freePort };

export interface DaemonProcess {
  child: ChildProcess;
  /** Every line the daemon logged so far. */
  lines: string[];
  /** The lines that parsed as JSON log entries. */
  entries: LogEntry[];
  readinessPort: number;
  monitoringPort: number;
  /** Resolves once a log line matches. */
  waitForLog(match: (entry: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

async function waitForReadyz(port: number, daemon: DaemonProcess, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) }).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) return;
    if (Date.now() > deadline || daemon.child.exitCode !== null) {
      throw new Error(`daemon not ready within ${timeoutMs} ms (last /readyz ${status}):\n${daemon.lines.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The environment `startDaemon` gives `dist/install-cni`: the host root's paths, a fake API address, repair and ambient off. */
export function daemonEnv(root: HostRoot, extraEnv: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_BIN_SOURCE_DIR: root.binSource,
    CNI_BIN_TARGET_DIRS: root.binTarget,
    MOUNTED_CNI_NET_DIR: root.netDir,
    CNI_AGENT_RUN_DIR: root.runDir,
    SERVICE_ACCOUNT_DIR: root.serviceAccountDir,
    KUBERNETES_SERVICE_HOST: '127.0.0.1',
    KUBERNETES_SERVICE_PORT: '6443',
    KUBERNETES_NODE_NAME: 'test-node',
    POD_NAMESPACE: 'istio-system',
    REPAIR_ENABLED: 'false',
    AMBIENT_ENABLED: 'false',
    ...extraEnv,
  };
}

/**
 * Starts `dist/install-cni` (or `executable`, another build of it) against a scratch host root.
 * Without a KUBECONFIG in `extraEnv` the agent has no API access. Resolves once `/readyz` answers 200
 * (unless `waitReady` is false).
 */
export async function startDaemon(
  root: HostRoot,
  extraEnv: Record<string, string> = {},
  waitReady = true,
  args: string[] = [],
  executable = DAEMON,
): Promise<DaemonProcess> {
  const readinessPort = await freePort();
  const monitoringPort = await freePort();
  const [command, ...argv] = launchArgv(executable, args);
  const child = spawn(command, argv, {
    env: daemonEnv(root, { READINESS_PORT: String(readinessPort), MONITORING_PORT: String(monitoringPort), ...extraEnv }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log = watchDaemonLog(child);
  const daemon: DaemonProcess = {
    child,
    lines: log.lines,
    entries: log.entries,
    readinessPort,
    monitoringPort,
    waitForLog: log.waitForLog,
    stop: (signal = 'SIGTERM') => log.stop(signal),
  };
  await daemon.waitForLog((e) => e.msg === 'hand-off server listening');
  if (waitReady) await waitForReadyz(readinessPort, daemon);
  return daemon;
}
