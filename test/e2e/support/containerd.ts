import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { startManagedProcess, waitFor, type ManagedProcess } from './managedProcess.ts';
import { ensureNetnsMountPoint } from './firstUseArtefacts.ts';
import { pauseImageRef, rigBinary, rigRuntimePath } from './rigPaths.ts';
import { runCommand } from './runCommand.ts';

/** The subset of the CRI PodSandboxConfig (crictl's snake_case JSON) the e2e tests use. */
export interface PodSandboxConfig {
  metadata: { name: string; namespace: string; uid: string; attempt?: number };
  hostname?: string;
  log_directory?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  port_mappings?: { protocol?: number; container_port: number; host_port?: number; host_ip?: string }[];
  linux?: Record<string, unknown>;
}

export interface PodSandboxStatus {
  id: string;
  state: string;
  network?: { ip?: string; additionalIps?: { ip: string }[] };
  [key: string]: unknown;
}

export interface Containerd {
  readonly dir: string;
  readonly socket: string;
  /** The CRI plugin's CNI conf dir (scratch, empty at start). */
  readonly cniConfDir: string;
  /** The CRI plugin's CNI bin dir (scratch, empty at start). */
  readonly cniBinDir: string;
  /**
   * The kubepods-like cgroup parent of a pod (`/<rig root>/besteffort/pod<uid>`), as kubelet's
   * cgroupfs driver names it: the ambient agent finds a pod's processes by the `pod<uid>` segment.
   */
  podCgroupParent(uid: string): string;
  readonly process: ManagedProcess;
  /** Runs crictl against this containerd only (never /etc/crictl.yaml). */
  crictl(args: readonly string[], options?: { timeoutMs?: number }): Promise<string>;
  /** Resolves once the CRI status reports NetworkReady, i.e. the CRI plugin loaded a CNI config. */
  waitNetworkReady(timeoutMs?: number): Promise<void>;
  /** `crictl runp`; returns the sandbox id. */
  runPodSandbox(config: PodSandboxConfig): Promise<string>;
  inspectPodSandbox(id: string): Promise<{ status: PodSandboxStatus; info: Record<string, unknown> }>;
  stopPodSandbox(id: string): Promise<void>;
  removePodSandbox(id: string): Promise<void>;
  /** Force-removes every sandbox, stops containerd and any shim it left, unmounts and deletes the scratch dirs. */
  stop(): Promise<void>;
}

// Snapshotters and plugins that would touch host paths or fail noisily on this machine. NRI would
// listen on the host-wide /var/run/nri/nri.sock (and leave it behind).
const DISABLED_PLUGINS = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.internal.v1.opt',
  'io.containerd.tracing.processor.v1.otlp',
];

function tomlString(value: string): string {
  return JSON.stringify(value);
}

/** `env PATH=<rig bin first> <rig containerd> --config <configPath>`: the rig's containerd, shim and runc. */
export function containerdArgv(configPath: string): string[] {
  return ['env', `PATH=${rigRuntimePath()}`, rigBinary('containerd'), '--config', configPath];
}

/** The rig's ctr against one containerd socket and namespace. */
export function ctrArgv(socket: string, namespace: string): string[] {
  return [rigBinary('ctr'), '--address', socket, '--namespace', namespace];
}

/**
 * The top of every rig containerd config (containerd 2.3's config version 4, where the gRPC and
 * ttrpc listeners are server plugins): own root, state and sockets.
 */
export function containerdBaseConfig(dir: string, socket: string, disabledPlugins: readonly string[]): string[] {
  return [
    'version = 4',
    `root = ${tomlString(join(dir, 'root'))}`,
    `state = ${tomlString(join(dir, 'state'))}`,
    `disabled_plugins = [${[...DISABLED_PLUGINS, ...disabledPlugins].map(tomlString).join(', ')}]`,
    "[plugins.'io.containerd.server.v1.grpc']",
    `  address = ${tomlString(socket)}`,
    "[plugins.'io.containerd.server.v1.ttrpc']",
    `  address = ${tomlString(`${socket}.ttrpc`)}`,
  ];
}

/**
 * containerd 2.x's config.toml for a rig runtime rooted at dir: CRI on, runc with
 * cgroupfs, CNI from confDir/binDir, the local pause image as the sandbox image.
 */
export function renderContainerdConfig(dir: string, socket: string, confDir: string, binDir: string, sandboxImage: string): string {
  const images = "plugins.'io.containerd.cri.v1.images'";
  const runtime = "plugins.'io.containerd.cri.v1.runtime'";
  return [
    ...containerdBaseConfig(dir, socket, []),
    `[${images}]`,
    '  snapshotter = "overlayfs"',
    `[${images}.pinned_images]`,
    `  sandbox = ${tomlString(sandboxImage)}`,
    `[${runtime}]`,
    '  enable_selinux = false',
    '  disable_apparmor = true',
    // The sandbox asks for oom_score_adj -998, which this machine's process may not lower to.
    '  restrict_oom_score_adj = true',
    `[${runtime}.containerd]`,
    '  default_runtime_name = "runc"',
    `[${runtime}.containerd.runtimes.runc]`,
    '  runtime_type = "io.containerd.runc.v2"',
    `  runtime_path = ${tomlString(rigBinary('containerd-shim-runc-v2'))}`,
    `[${runtime}.containerd.runtimes.runc.options]`,
    '  SystemdCgroup = false',
    `  BinaryName = ${tomlString(rigBinary('runc'))}`,
    `  Root = ${tomlString(join(dir, 'runc'))}`,
    `[${runtime}.cni]`,
    `  bin_dirs = [${tomlString(binDir)}]`,
    `  conf_dir = ${tomlString(confDir)}`,
    '  max_conf_num = 1',
    "[plugins.'io.containerd.grpc.v1.cri']",
    '  stream_server_address = "127.0.0.1"',
    '  stream_server_port = "0"',
    '',
  ].join('\n');
}

/** Starts containerd with a private config: own root/state/socket, CRI on, scratch CNI dirs, the local pause image. */
export async function startContainerd(): Promise<Containerd> {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-e2e-containerd-'));
  // A pod with its own user namespace (`hostUsers: false`) runs as a mapped root that runc must
  // let reach the rootfs under the state dir: searchable, not listable, as containerd's own dirs.
  chmodSync(dir, 0o711);
  const socket = join(dir, 'containerd.sock');
  const cniConfDir = join(dir, 'cni/net.d');
  const cniBinDir = join(dir, 'cni/bin');
  const sandboxDir = join(dir, 'sandboxes');
  for (const d of [cniConfDir, cniBinDir, sandboxDir]) mkdirSync(d, { recursive: true });
  const sandboxImage = pauseImageRef();
  const configPath = join(dir, 'config.toml');
  writeFileSync(configPath, renderContainerdConfig(dir, socket, cniConfDir, cniBinDir, sandboxImage));
  const crictlConfig = join(dir, 'crictl.yaml');
  writeFileSync(crictlConfig, `runtime-endpoint: unix://${socket}\nimage-endpoint: unix://${socket}\ntimeout: 60\n`);

  await ensureNetnsMountPoint();
  const proc = startManagedProcess('containerd', containerdArgv(configPath), join(dir, 'containerd.log'));
  const crictlBin = rigBinary('crictl');
  const crictl = async (args: readonly string[], options: { timeoutMs?: number } = {}) =>
    (await runCommand([crictlBin, '--config', crictlConfig, ...args], { timeoutMs: options.timeoutMs ?? 90_000 })).stdout;

  let sandboxCount = 0;
  const cgroupRoot = `kubepods-${basename(dir)}`;
  const containerd: Containerd = {
    dir,
    socket,
    cniConfDir,
    cniBinDir,
    podCgroupParent: (uid) => `/${cgroupRoot}/besteffort/pod${uid}`,
    process: proc,
    crictl,
    async waitNetworkReady(timeoutMs = 30_000) {
      await waitFor(
        'CRI NetworkReady',
        async () => {
          const info = JSON.parse(await crictl(['info'])) as { status?: { conditions?: { type: string; status: boolean }[] } };
          return info.status?.conditions?.some((c) => c.type === 'NetworkReady' && c.status) === true ? true : undefined;
        },
        { process: proc, timeoutMs },
      );
    },
    async runPodSandbox(config) {
      const file = join(sandboxDir, `sandbox-${++sandboxCount}.json`);
      writeFileSync(file, JSON.stringify({ log_directory: join(sandboxDir, `logs-${sandboxCount}`), ...config }));
      return (await crictl(['runp', file])).trim();
    },
    async inspectPodSandbox(id) {
      return JSON.parse(await crictl(['inspectp', '-o', 'json', id])) as { status: PodSandboxStatus; info: Record<string, unknown> };
    },
    async stopPodSandbox(id) {
      await crictl(['stopp', id]);
    },
    async removePodSandbox(id) {
      await crictl(['rmp', id]);
    },
    async stop() {
      if (proc.child.exitCode === null && proc.child.signalCode === null) {
        await runCommand([crictlBin, '--config', crictlConfig, 'rmp', '--all', '--force'], { allowFailure: true, timeoutMs: 90_000 });
      }
      await proc.stop();
      await killProcessesMentioning(dir);
      await unmountUnder(dir);
      removeCgroupTree(cgroupRoot);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await waitFor('containerd CRI', async () => ((await crictl(['version'])).includes('RuntimeName') ? true : undefined), {
      process: proc,
      timeoutMs: 30_000,
    });
    await runCommand([...ctrArgv(socket, 'k8s.io'), 'images', 'import', rigBinary('pause-image.tar')]);
    // The CRI plugin learns about imported images from events; RunPodSandbox would try to pull until then.
    await waitFor(`CRI image ${sandboxImage}`, async () => ((await crictl(['inspecti', sandboxImage])).length > 0 ? true : undefined), {
      process: proc,
      timeoutMs: 30_000,
    });
  } catch (error) {
    await containerd.stop();
    throw error;
  }
  return containerd;
}

/** Shims outlive containerd when a sandbox survives; they carry our socket path on their command line. */
export async function killProcessesMentioning(dir: string): Promise<void> {
  const { stdout } = await runCommand(['ps', '-eo', 'pid=,args=']);
  for (const line of stdout.split('\n')) {
    const match = /^\s*(\d+)\s+(.*)$/.exec(line);
    if (match === null || !match[2]?.includes(dir)) continue;
    const pid = Number(match[1]);
    if (pid === process.pid) continue;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** runc removes a container's cgroup but not the parents kubelet would own: remove them, deepest first, in every hierarchy. */
export function removeCgroupTree(name: string): void {
  const hierarchies = readdirSync('/sys/fs/cgroup', { withFileTypes: true }).filter((e) => e.isDirectory());
  for (const h of hierarchies) {
    const top = join('/sys/fs/cgroup', h.name, name);
    if (!existsSync(top)) continue;
    const removeDirs = (d: string): void => {
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) removeDirs(join(d, e.name));
      try {
        rmdirSync(d);
      } catch {
        // still in use (a process survived): the leak check reports the process
      }
    };
    removeDirs(top);
  }
}

export async function unmountUnder(dir: string): Promise<void> {
  const mountPoints = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((mp): mp is string => mp?.startsWith(`${dir}/`) === true)
    .sort((a, b) => b.length - a.length);
  for (const mp of mountPoints) await runCommand(['umount', '-l', mp], { allowFailure: true });
}
