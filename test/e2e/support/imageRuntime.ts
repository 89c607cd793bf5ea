import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startManagedProcess, waitFor, type ManagedProcess } from './managedProcess.ts';
import { runCommand, type CommandResult } from './runCommand.ts';

type RunResult = CommandResult & { exitCode: number };

/** A containerd of its own (no CRI) for importing an image archive and running commands in it with ctr. */
export interface ImageRuntime {
  readonly process: ManagedProcess;
  /** `ctr images import`; returns the image names it printed. */
  importArchive(archive: string): Promise<string>;
  /** `ctr run --rm`: a fresh container (own network namespace) running argv, with the chart's capabilities. */
  run(image: string, argv: readonly string[], options?: { env?: Record<string, string>; input?: string; allowFailure?: boolean }): Promise<RunResult>;
  stop(): Promise<void>;
}

/** The agent container's capabilities in the chart's DaemonSet. */
const AGENT_CAPABILITIES = ['CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_SYS_PTRACE', 'CAP_SYS_ADMIN', 'CAP_DAC_OVERRIDE'];

export async function startImageRuntime(): Promise<ImageRuntime> {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-image-containerd-'));
  const socket = join(dir, 'containerd.sock');
  const namespace = `istio-cni-image-${process.pid}`;
  const config = join(dir, 'config.toml');
  writeFileSync(
    config,
    [
      'version = 2',
      `root = ${JSON.stringify(join(dir, 'root'))}`,
      `state = ${JSON.stringify(join(dir, 'state'))}`,
      'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]',
      '[grpc]',
      `  address = ${JSON.stringify(socket)}`,
      '[ttrpc]',
      `  address = ${JSON.stringify(`${socket}.ttrpc`)}`,
      '',
    ].join('\n'),
  );
  const proc = startManagedProcess('containerd', ['containerd', '--config', config], join(dir, 'containerd.log'));
  const ctr = (args: readonly string[], options: { input?: string; allowFailure?: boolean } = {}) =>
    runCommand(['ctr', '--address', socket, '--namespace', namespace, ...args], { timeoutMs: 120_000, ...options });
  let containers = 0;
  const runtime: ImageRuntime = {
    process: proc,
    async importArchive(archive) {
      return (await ctr(['images', 'import', archive])).stdout;
    },
    async run(image, argv, options = {}) {
      const env = Object.entries(options.env ?? {}).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
      const caps = AGENT_CAPABILITIES.flatMap((c) => ['--cap-add', c]);
      return ctr(['run', '--rm', ...caps, ...env, image, `c${process.pid}-${++containers}`, ...argv], options);
    },
    async stop() {
      await proc.stop();
      await runCommand(['umount', '--recursive', '--lazy', dir], { allowFailure: true });
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await waitFor('containerd', async () => ((await ctr(['version'], { allowFailure: true })).stdout.includes('Server:') ? true : undefined), {
      process: proc,
      timeoutMs: 30_000,
    });
  } catch (error) {
    await runtime.stop();
    throw error;
  }
  return runtime;
}
