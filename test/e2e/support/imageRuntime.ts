import { existsSync, mkdirSync, mkdtempSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cgroupHierarchies } from './cgroupHierarchies.ts';
import { containerdArgv, containerdBaseConfig, ctrArgv } from './containerd.ts';
import { startManagedProcess, waitFor, type ManagedProcess } from './managedProcess.ts';
import { runCommand, type CommandResult } from './runCommand.ts';

type RunResult = CommandResult & { exitCode: number };

/** A containerd of its own (no CRI) for importing an image archive and running commands in it with ctr. */
export interface ImageRuntime {
  readonly process: ManagedProcess;
  /**
   * `ctr images import`; returns the image references the runtime lists afterwards (containerd 2's
   * ctr prints the imported name with its dashes replaced by spaces, so its output is no evidence).
   */
  importArchive(archive: string): Promise<string[]>;
  /**
   * `ctr run --rm`: a fresh container (own network namespace) running argv, with the chart's
   * capabilities. `files` appear read-only under /input: ctr's stdin forwarding can lose the end of
   * input and leave a reader blocked, so tools read files instead.
   */
  run(
    image: string,
    argv: readonly string[],
    options?: { env?: Record<string, string>; files?: Record<string, string>; allowFailure?: boolean },
  ): Promise<RunResult>;
  stop(): Promise<void>;
}

/** The agent container's capabilities in the chart's DaemonSet. */
const AGENT_CAPABILITIES = ['CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_SYS_PTRACE', 'CAP_SYS_ADMIN', 'CAP_DAC_OVERRIDE'];

export async function startImageRuntime(): Promise<ImageRuntime> {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-image-containerd-'));
  const socket = join(dir, 'containerd.sock');
  const namespace = `istio-cni-image-${process.pid}`;
  const config = join(dir, 'config.toml');
  // No CRI: this containerd only imports an image and runs containers with ctr.
  const noCri = [
    'io.containerd.grpc.v1.cri',
    'io.containerd.cri.v1.runtime',
    'io.containerd.cri.v1.images',
    'io.containerd.podsandbox.controller.v1.podsandbox',
  ];
  writeFileSync(config, [...containerdBaseConfig(dir, socket, noCri), ''].join('\n'));
  const proc = startManagedProcess('containerd', containerdArgv(config), join(dir, 'containerd.log'));
  const ctr = (args: readonly string[], options: { allowFailure?: boolean } = {}) =>
    runCommand([...ctrArgv(socket, namespace), ...args], { timeoutMs: 120_000, ...options });
  let containers = 0;
  const runtime: ImageRuntime = {
    process: proc,
    async importArchive(archive) {
      await ctr(['images', 'import', archive]);
      return (await ctr(['images', 'ls', '-q'])).stdout.split('\n').filter(Boolean);
    },
    async run(image, argv, options = {}) {
      const id = `c${process.pid}-${++containers}`;
      const env = Object.entries(options.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
      const caps = AGENT_CAPABILITIES.flatMap((c) => ['--cap-add', c]);
      const mounts: string[] = [];
      if (options.files !== undefined) {
        const input = join(dir, 'input', id);
        mkdirSync(input, { recursive: true });
        for (const [name, text] of Object.entries(options.files)) writeFileSync(join(input, name), text);
        mounts.push('--mount', `type=bind,src=${input},dst=/input,options=rbind:ro`);
      }
      // ctr forwards its own timeout's SIGTERM to the container's PID 1, which ignores it: kill the task.
      const killer = setTimeout(
        () => void ctr(['task', 'kill', '--signal', 'SIGKILL', id], { allowFailure: true }).catch(() => {}),
        60_000,
      );
      try {
        return await ctr(['run', '--rm', ...caps, ...env, ...mounts, image, id, ...argv], { allowFailure: options.allowFailure ?? false });
      } finally {
        clearTimeout(killer);
      }
    },
    async stop() {
      await proc.stop();
      await runCommand(['umount', '--recursive', '--lazy', dir], { allowFailure: true });
      rmSync(dir, { recursive: true, force: true });
      // runc puts each container's cgroup under /<namespace>/ and removes only the container's own.
      for (const hierarchy of cgroupHierarchies()) {
        const cgroup = join(hierarchy, namespace);
        if (existsSync(cgroup)) rmdirSync(cgroup);
      }
    },
  };
  try {
    await waitFor(
      'containerd',
      async () => ((await ctr(['version'], { allowFailure: true })).stdout.includes('Server:') ? true : undefined),
      {
        process: proc,
        timeoutMs: 30_000,
      },
    );
  } catch (error) {
    await runtime.stop();
    throw error;
  }
  return runtime;
}
