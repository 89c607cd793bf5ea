import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { findObject, RELEASE_NAMESPACE, type KubeObject } from './chart.ts';
import type { Cluster } from './cluster.ts';
import type { Containerd } from './containerd.ts';
import { freePort } from '../../support/freePort.ts';
import { startManagedProcess, waitFor, type ManagedProcess } from './managedProcess.ts';
import { writeProjectedVolume } from './projectedVolume.ts';
import { REPO_ROOT } from './rigPaths.ts';

export const DIST = join(REPO_ROOT, 'dist');
export const AGENT_POD_NAME = 'istio-cni-node-e2e';

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string }; resourceFieldRef?: unknown };
}

interface Container {
  name: string;
  args?: string[];
  env?: EnvVar[];
}

/** The plugin kubeconfig the installer writes (upstream `cni/pkg/install/kubeconfig.go`). */
export interface PluginKubeconfig {
  server: string;
  caPem: string;
  token: string;
}

/**
 * `dist/install-cni` run as the DaemonSet's container would be, with a scratch host root: the
 * chart's ConfigMap as environment (envFrom), the container's env with the downward API resolved
 * for the rig node, its args, a service-account directory laid out like the projected volume, and
 * the host paths pointed at containerd's CNI dirs.
 */
export interface IstioCniNode {
  readonly dir: string;
  readonly runDir: string;
  readonly serviceAccountDir: string;
  readonly kubeconfigPath: string;
  /** ZTUNNEL_UDS_ADDRESS: the DaemonSet's /var/run/ztunnel mount, in the scratch dir. */
  readonly ztunnelSocket: string;
  readonly readinessPort: number;
  readonly env: Record<string, string>;
  readonly args: string[];
  /** The running daemon (undefined between kill/stop and start). */
  readonly daemon: ManagedProcess | undefined;
  /** Starts the daemon (again) and waits for /readyz 200. */
  start(): Promise<void>;
  /** GET /readyz status, 0 when nothing answers. */
  readyz(): Promise<number>;
  /** Writes a new token (and the CA and namespace) with kubelet's `..data` symlink swap. */
  writeToken(token: string): void;
  readKubeconfig(): PluginKubeconfig;
  /** SIGKILL: no cleanup runs. */
  kill(): Promise<void>;
  /** SIGTERM and wait for the daemon to exit. */
  terminate(): Promise<number | null>;
  /** Stops the daemon if running and deletes the scratch dirs. */
  dispose(): Promise<void>;
}

export interface IstioCniNodeOptions {
  cluster: Cluster;
  containerd: Containerd;
  /** The chart's rendering (ConfigMap and DaemonSet are read from it). */
  objects: readonly KubeObject[];
  nodeName: string;
  token: string;
  extraEnv?: Record<string, string>;
}

/** Resolves the container's env as kubelet would for a pod of this node (downward API). */
function containerEnv(container: Container, nodeName: string, podName: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    const field = e.valueFrom?.fieldRef?.fieldPath;
    if (field === 'spec.nodeName') env[e.name] = nodeName;
    else if (field === 'metadata.name') env[e.name] = podName;
    else if (field === 'metadata.namespace') env[e.name] = RELEASE_NAMESPACE;
    // resourceFieldRef (GOMEMLIMIT) means nothing to a Node.js process: left unset.
  }
  return env;
}

export async function createIstioCniNode(options: IstioCniNodeOptions): Promise<IstioCniNode> {
  const { cluster, containerd } = options;
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-e2e-node-'));
  // The image's /opt/cni/bin: the plugin the daemon copies to the host.
  const imageBinDir = join(dir, 'image/opt/cni/bin');
  mkdirSync(imageBinDir, { recursive: true });
  copyFileSync(join(DIST, 'istio-cni'), join(imageBinDir, 'istio-cni'));
  const runDir = join(dir, 'var/run/istio-cni');
  const serviceAccountDir = join(dir, 'var/run/secrets/kubernetes.io/serviceaccount');
  const kubeconfigPath = join(runDir, 'istio-cni-kubeconfig');
  const ztunnelDir = join(dir, 'var/run/ztunnel');
  mkdirSync(ztunnelDir, { recursive: true });
  const ztunnelSocket = join(ztunnelDir, 'ztunnel.sock');
  const configMap = findObject(options.objects, 'ConfigMap', 'istio-cni-config').data as Record<string, string>;
  const ds = findObject(options.objects, 'DaemonSet', 'istio-cni-node') as unknown as {
    spec: { template: { spec: { containers: Container[] } } };
  };
  const container = ds.spec.template.spec.containers.find((c) => c.name === 'install-cni');
  if (container === undefined) throw new Error('the DaemonSet has no install-cni container');
  const readinessPort = await freePort();
  const monitoringPort = await freePort();
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    ...configMap,
    ...containerEnv(container, options.nodeName, AGENT_POD_NAME),
    // What kubelet injects into every pod for the API service.
    KUBERNETES_SERVICE_HOST: cluster.host,
    KUBERNETES_SERVICE_PORT: String(cluster.port),
    // The DaemonSet's volume mounts, pointed at the scratch host root.
    CNI_BIN_SOURCE_DIR: imageBinDir,
    CNI_BIN_TARGET_DIRS: containerd.cniBinDir,
    MOUNTED_CNI_NET_DIR: containerd.cniConfDir,
    CNI_AGENT_RUN_DIR: runDir,
    SERVICE_ACCOUNT_DIR: serviceAccountDir,
    ZTUNNEL_UDS_ADDRESS: ztunnelSocket,
    // This machine is the host: its own procfs is the host's.
    HOST_PROC_DIR: '/proc',
    READINESS_PORT: String(readinessPort),
    MONITORING_PORT: String(monitoringPort),
    ...options.extraEnv,
  };
  const args = container.args ?? [];
  const writeToken = (token: string) =>
    writeProjectedVolume(serviceAccountDir, { token, 'ca.crt': cluster.caPem, namespace: RELEASE_NAMESPACE });
  writeToken(options.token);

  let daemon: ManagedProcess | undefined;
  const readyz = async (): Promise<number> => {
    try {
      return (await fetch(`http://127.0.0.1:${readinessPort}/readyz`, { signal: AbortSignal.timeout(2000) })).status;
    } catch {
      return 0;
    }
  };
  const node: IstioCniNode = {
    dir,
    runDir,
    serviceAccountDir,
    kubeconfigPath,
    ztunnelSocket,
    readinessPort,
    env,
    args,
    get daemon() {
      return daemon;
    },
    async start() {
      if (daemon !== undefined) throw new Error('install-cni is already running');
      const proc = startManagedProcess('install-cni', [join(DIST, 'install-cni'), ...args], join(dir, 'install-cni.log'), env);
      daemon = proc;
      await waitFor('install-cni /readyz 200', async () => ((await readyz()) === 200 ? true : undefined), {
        process: proc,
        timeoutMs: 60_000,
      });
    },
    readyz,
    writeToken,
    readKubeconfig() {
      const doc = parseYaml(readFileSync(kubeconfigPath, 'utf8')) as {
        clusters: { cluster: { server: string; 'certificate-authority-data': string } }[];
        users: { user: { token: string } }[];
      };
      const c = doc.clusters[0]?.cluster;
      const token = doc.users[0]?.user.token;
      if (c === undefined || token === undefined) throw new Error(`${kubeconfigPath} has no cluster or user`);
      return { server: c.server, caPem: Buffer.from(c['certificate-authority-data'], 'base64').toString('utf8'), token };
    },
    async kill() {
      const proc = daemon;
      if (proc === undefined) return;
      proc.child.kill('SIGKILL');
      await proc.stop();
      daemon = undefined;
    },
    async terminate() {
      const proc = daemon;
      if (proc === undefined) return null;
      await proc.stop(30_000);
      daemon = undefined;
      return proc.child.exitCode;
    },
    async dispose() {
      await daemon?.stop();
      daemon = undefined;
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
  return node;
}
