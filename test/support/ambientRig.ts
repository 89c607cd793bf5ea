/**
 * `dist/install-cni` with ambient mode on, running INSIDE a scratch node netns (so its host rules
 * and probe sets land there, and a probe from that netns is a "kubelet" probe), against the fake
 * Kubernetes API. TCP does not cross namespaces, so `netnsPortBridge.ts` runs next to the daemon:
 * the API's port on 127.0.0.1 inside the node netns leads (through a Unix socket) to the fake API
 * in the test's netns, and the daemon's readiness and metrics ports are reached through Unix
 * sockets from here. The plugin runs in the test's netns and reaches the daemon by its run dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { request } from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { watchDaemonLog } from './watchDaemonLog.ts';
import { fileURLToPath } from 'node:url';
import { DAEMON, PLUGIN, daemonEnv as baseDaemonEnv, freePort, makeHostRoot, type HostRoot } from './daemonProcess.ts';
import { execPlugin, type ExecResult } from './execPlugin.ts';
import { startFakeKubeApi, type FakeKubeApi, type KubeObject } from './fakeKubeApi.ts';
import { startFaultProxy, type FaultProxy } from './faultProxy.ts';
import { DEFAULT_ENABLEMENT_SELECTORS } from './meshPods.ts';
import type { BridgeSpec } from './netnsPortBridge.ts';
import { cniEnv, installedPluginConf, type PodAttachment } from './startAgentRig.ts';

const bridgeScript = fileURLToPath(new URL('./netnsPortBridge.ts', import.meta.url));
const SERVICE_ACCOUNT_TOKEN = 'test-token';

export interface NodeDaemon {
  child: ChildProcess;
  lines: string[];
  waitForLog(match: (entry: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** Entries logged so far that match. */
  logged(match: (entry: Record<string, unknown>) => boolean): Record<string, unknown>[];
  /** SIGTERM (default) or SIGKILL; resolves with the exit code (null when killed by a signal). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface AmbientRig {
  root: HostRoot;
  api: FakeKubeApi;
  /** Between the daemon and the API, with `viaFaultProxy`. */
  proxy?: FaultProxy;
  nodeNetns: string;
  ztunnelPath: string;
  daemon: NodeDaemon;
  /** GET on the daemon's readiness or metrics port (through the bridge). */
  get(port: 'readiness' | 'metrics', path: string): Promise<{ status: number; body: string }>;
  /**
   * Starts the daemon (again) in the node netns and waits for /readyz 200 (unless `waitReady` false);
   * `changed` goes over its settings from then on.
   */
  startDaemon(waitReady?: boolean, changed?: Record<string, string>): Promise<NodeDaemon>;
  pluginConf(attachment: PodAttachment, extra?: Record<string, unknown>): Record<string, unknown>;
  /** Execs the built plugin like libcni for `pod` (debug plugin log level). */
  exec(command: string, pod: KubeObject, attachment: PodAttachment): Promise<ExecResult>;
  /** Stops the daemon (SIGTERM), the bridge and the API; removes the host root. Not the node netns. */
  close(): Promise<void>;
}

function httpGet(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'GET', timeout: 2000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

async function startBridge(netnsPath: string, spec: BridgeSpec): Promise<ChildProcess> {
  const child = spawn('nsenter', [`--net=${netnsPath}`, '--', process.execPath, bridgeScript, JSON.stringify(spec)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`port bridge not ready: ${stderr}`)), 10_000);
    createInterface({ input: child.stdout! }).once('line', () => {
      clearTimeout(timer);
      resolve();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`port bridge exited with ${code}: ${stderr}`));
    });
  });
  return child;
}

function spawnNodeDaemon(netnsPath: string, env: Record<string, string>): NodeDaemon {
  const child = spawn('nsenter', [`--net=${netnsPath}`, '--', DAEMON], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const log = watchDaemonLog(child);
  return {
    child,
    lines: log.lines,
    logged: (match) => log.entries.filter(match),
    waitForLog: log.waitForLog,
    stop: (signal = 'SIGTERM') => log.stop(signal, 15_000),
  };
}

/**
 * `daemonEnv` overrides daemon settings (e.g. NATIVE_NFTABLES); `viaFaultProxy` puts a
 * fault-injecting proxy (`rig.proxy`) between the daemon and the API. The node netns must exist.
 */
export async function startAmbientRig(
  nodeNetns: string,
  daemonEnv: Record<string, string> = {},
  options: { viaFaultProxy?: boolean } = {},
): Promise<AmbientRig> {
  const root = makeHostRoot();
  const closers: (() => Promise<void> | void)[] = [() => root.remove()];
  const cleanup = async () => {
    for (const c of closers.reverse()) await Promise.resolve(c()).catch(() => undefined);
  };
  try {
    const api = await startFakeKubeApi({ token: SERVICE_ACCOUNT_TOKEN });
    closers.push(() => api.close());
    const apiPort = Number(new URL(api.url).port);
    const proxy = options.viaFaultProxy ? await startFaultProxy(api.url) : undefined;
    if (proxy !== undefined) closers.push(() => proxy.close());
    // Test netns side: Unix socket → the fake API's TCP port (or the proxy's).
    const apiSock = join(root.dir, 'api.sock');
    const relayPort = proxy?.port ?? apiPort;
    const relayed = new Set<net.Socket>();
    const apiRelay = net.createServer((c) => {
      const upstream = net.connect({ host: '127.0.0.1', port: relayPort });
      relayed.add(c).add(upstream);
      c.on('close', () => relayed.delete(c));
      upstream.on('close', () => relayed.delete(upstream));
      c.on('error', () => upstream.destroy());
      upstream.on('error', () => c.destroy());
      c.pipe(upstream);
      upstream.pipe(c);
    });
    await new Promise<void>((resolve) => apiRelay.listen(apiSock, resolve));
    closers.push(() => {
      // close() waits for every connection: end them rather than wait on their peers.
      const closed = new Promise<void>((resolve) => apiRelay.close(() => resolve()));
      for (const s of relayed) s.destroy();
      return closed;
    });
    const readinessPort = await freePort();
    const monitoringPort = await freePort();
    const sockets = { readiness: join(root.dir, 'readiness.sock'), metrics: join(root.dir, 'metrics.sock') };
    const bridge = await startBridge(nodeNetns, {
      tcpToUnix: [{ port: apiPort, path: apiSock }],
      unixToTcp: [
        { path: sockets.readiness, port: readinessPort },
        { path: sockets.metrics, port: monitoringPort },
      ],
    });
    closers.push(() => {
      bridge.stdin?.end();
      bridge.kill('SIGKILL');
    });
    const kubeconfig = join(root.dir, 'agent-kubeconfig');
    api.writeKubeconfig(kubeconfig);
    const ztunnelDir = join(root.dir, 'var/run/ztunnel');
    mkdirSync(ztunnelDir, { recursive: true });
    const ztunnelPath = join(ztunnelDir, 'ztunnel.sock');
    let env = baseDaemonEnv(root, {
      KUBECONFIG: kubeconfig,
      KUBERNETES_SERVICE_PORT: String(apiPort),
      KUBERNETES_SERVICE_PROTOCOL: 'http',
      READINESS_PORT: String(readinessPort),
      MONITORING_PORT: String(monitoringPort),
      AMBIENT_ENABLED: 'true',
      AMBIENT_ENABLEMENT_SELECTOR: JSON.stringify(DEFAULT_ENABLEMENT_SELECTORS),
      ZTUNNEL_UDS_ADDRESS: ztunnelPath,
      HOST_PROC_DIR: '/proc',
      ALLOW_SWITCH_TO_HOST_NS: 'false',
      ...daemonEnv,
    });
    const get = (port: 'readiness' | 'metrics', path: string) => httpGet(sockets[port], path);
    const rig: AmbientRig = {
      root,
      api,
      ...(proxy ? { proxy } : {}),
      nodeNetns,
      ztunnelPath,
      daemon: undefined as unknown as NodeDaemon,
      get,
      async startDaemon(waitReady = true, changed = {}) {
        env = { ...env, ...changed };
        const daemon = spawnNodeDaemon(nodeNetns, env);
        rig.daemon = daemon;
        await daemon.waitForLog((e) => e.msg === 'hand-off server listening', 30_000);
        if (!waitReady) return daemon;
        const deadline = Date.now() + 30_000;
        for (;;) {
          const status = await get('readiness', '/readyz').then(
            (r) => r.status,
            () => 0,
          );
          if (status === 200) return daemon;
          if (Date.now() > deadline || daemon.child.exitCode !== null) {
            throw new Error(`daemon not ready (last /readyz ${status}):\n${daemon.lines.join('\n')}`);
          }
          await new Promise((r) => setTimeout(r, 50));
        }
      },
      pluginConf: (attachment, extra = {}) => installedPluginConf(root.netDir, attachment, extra),
      exec(command, pod, attachment) {
        const conf = rig.pluginConf(attachment, { plugin_log_level: 'debug' });
        return execPlugin(PLUGIN, cniEnv(command, pod, attachment), JSON.stringify(conf), { timeoutMs: 60_000 });
      },
      async close() {
        await rig.daemon?.stop();
        await cleanup();
      },
    };
    closers.push(async () => void (await rig.daemon?.stop('SIGKILL')));
    return rig;
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** The CNI attachment of a pod sandbox (the primary plugin's result carries its IP). */
export function attachmentOf(sandbox: { netns: { path: string }; containerId: string; ip: string; gateway: string }): PodAttachment {
  return { netns: sandbox.netns.path, containerId: sandbox.containerId, address: `${sandbox.ip}/24`, gateway: sandbox.gateway };
}
