import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { closeSync } from 'node:fs';
import { CommandError, type CommandResult, type CommandRunner, type RunOptions } from './commandRunner.ts';
import type { NetnsOwnerOpener } from './netnsOwnerUserns.ts';

export interface ExecCommandRunnerOptions {
  /** Base environment for every command; read once by the caller (defaults to process.env at creation). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Path or name of nsenter(1), used when a command runs inside a netns. */
  nsenter?: string;
  /** Default per-command timeout; a command never runs unbounded. */
  timeoutMs?: number;
  /**
   * A command whose stdout grows beyond this many bytes is killed and fails with
   * ERR_DATAPLANE_OUTPUT_TOO_LARGE: read-backs from a tenant's netns bound the agent's memory, and a
   * truncated read-back is never parsed as if it were whole. Stderr is kept up to 64 KiB (messages only).
   */
  maxOutputBytes?: number;
  /**
   * Finds the user namespace owning a netns, for `RunOptions.enterNetnsOwner` (the daemon passes
   * `openNetnsOwnerUserns`). Without it such commands run in the agent's user namespace, as upstream's.
   */
  netnsOwner?: NetnsOwnerOpener;
}

const defaultTimeoutMs = 30_000;
const defaultMaxOutputBytes = 16 * 1024 * 1024;
const maxStderrBytes = 64 * 1024;

/** The real runner: spawns the program directly (no shell), optionally under `nsenter --net=<path>`. */
export function createExecCommandRunner(options: ExecCommandRunnerOptions = {}): CommandRunner {
  const baseEnv = { ...(options.env ?? process.env) };
  const nsenter = options.nsenter ?? 'nsenter';
  const maxBytes = options.maxOutputBytes ?? defaultMaxOutputBytes;
  return {
    run(argv, runOptions = {}) {
      return runOnce(argv, runOptions, {
        nsenter,
        maxBytes,
        netnsOwner: options.netnsOwner,
        env: { ...baseEnv, ...runOptions.env },
        timeoutMs: runOptions.timeoutMs ?? options.timeoutMs ?? defaultTimeoutMs,
      });
    },
  };
}

interface Resolved {
  nsenter: string;
  maxBytes: number;
  netnsOwner: NetnsOwnerOpener | undefined;
  env: Record<string, string | undefined>;
  timeoutMs: number;
}

function runOnce(argv: readonly string[], options: RunOptions, r: Resolved): Promise<CommandResult> {
  if (argv.length === 0 || argv[0] === '') {
    return Promise.reject(new TypeError('argv must name a program'));
  }
  let ownerFd: number | undefined;
  if (options.netns !== undefined && options.enterNetnsOwner === true && r.netnsOwner !== undefined) {
    try {
      ownerFd = r.netnsOwner(options.netns);
    } catch (err) {
      const stderr = `cannot tell which user namespace owns the netns: ${(err as Error).message}`;
      return Promise.reject(
        new CommandError(
          'ERR_DATAPLANE_COMMAND_FAILED',
          { argv, netns: options.netns, exitCode: null, stdout: '', stderr },
          { cause: err },
        ),
      );
    }
  }
  const env = ownerFd === undefined ? r.env : ownedNetnsEnv(r.env);
  const full =
    options.netns === undefined
      ? [...argv]
      : [r.nsenter, `--net=${options.netns}`, ...(ownerFd === undefined ? [] : [`--user=${OWNER_FD_PATH}`]), '--', ...argv];
  const [program, ...args] = full as [string, ...string[]];
  return new Promise((resolve, reject) => {
    let child: ChildProcessWithoutNullStreams;
    try {
      child = spawn(program, args, {
        env,
        stdio: ownerFd === undefined ? ['pipe', 'pipe', 'pipe'] : ['pipe', 'pipe', 'pipe', ownerFd],
      }) as ChildProcessWithoutNullStreams;
    } finally {
      if (ownerFd !== undefined) closeSync(ownerFd);
    }
    const stdout = collect(r.maxBytes);
    const stderr = collect(maxStderrBytes);
    let tooLarge = false;
    child.stdout.on('data', (chunk: Buffer) => {
      if (stdout.push(chunk) || tooLarge) return;
      tooLarge = true;
      child.kill('SIGKILL');
    });
    child.stderr.on('data', stderr.push);
    let timedOut = false;
    let spawnError: NodeJS.ErrnoException | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, r.timeoutMs);
    child.on('error', (err: NodeJS.ErrnoException) => {
      spawnError = err;
    });
    // EPIPE when the program exits without reading stdin is not the failure worth reporting.
    child.stdin.on('error', () => {});
    child.stdin.end(options.stdin ?? '');
    child.on('close', (exitCode, signal) => {
      clearTimeout(timer);
      const details = {
        argv,
        exitCode,
        signal,
        stdout: stdout.text(),
        stderr: stderr.text(),
        ...(options.netns === undefined ? {} : { netns: options.netns }),
      };
      if (spawnError !== undefined) {
        const code = spawnError.code === 'ENOENT' ? 'ERR_DATAPLANE_COMMAND_NOT_FOUND' : 'ERR_DATAPLANE_COMMAND_FAILED';
        reject(new CommandError(code, { ...details, stderr: details.stderr || spawnError.message }, { cause: spawnError }));
      } else if (tooLarge) {
        reject(new CommandError('ERR_DATAPLANE_OUTPUT_TOO_LARGE', { ...details, stdout: '' }, { maxOutputBytes: r.maxBytes }));
      } else if (timedOut) {
        reject(new CommandError('ERR_DATAPLANE_COMMAND_TIMEOUT', details, { timeoutMs: r.timeoutMs }));
      } else if (exitCode === 127 && options.netns !== undefined && /failed to execute/.test(details.stderr)) {
        reject(new CommandError('ERR_DATAPLANE_COMMAND_NOT_FOUND', details));
      } else if (exitCode !== 0) {
        reject(new CommandError('ERR_DATAPLANE_COMMAND_FAILED', details));
      } else {
        resolve({ stdout: details.stdout, stderr: details.stderr });
      }
    });
  });
}

/** The owning user namespace is handed to nsenter as its fd 3. */
const OWNER_FD_PATH = '/proc/self/fd/3';

/**
 * In a pod's user namespace, the agent's root is the pod's mapped root: the legacy xtables lock file
 * the caller chose (the netns file, `xtablesRunOptions`) may not open there. The user namespace is
 * the pod's own, so it serves as the per-pod lock instead.
 */
function ownedNetnsEnv(env: Record<string, string | undefined>): Record<string, string | undefined> {
  return env.XTABLES_LOCKFILE === undefined ? env : { ...env, XTABLES_LOCKFILE: OWNER_FD_PATH };
}

/**
 * Starts a long-lived helper process (argv, no shell) with piped stdio; the caller owns its lifetime.
 * Product code starts processes only through this module, so there is one place to audit.
 */
export function spawnPiped(argv: readonly [string, ...string[]]): ChildProcessWithoutNullStreams {
  const [program, ...args] = argv;
  return spawn(program, args, { stdio: ['pipe', 'pipe', 'pipe'] });
}

/** Keeps up to `maxBytes` of a stream; `push` answers whether everything so far was kept. */
function collect(maxBytes: number): { push: (chunk: Buffer) => boolean; text: () => string } {
  const chunks: Buffer[] = [];
  let size = 0;
  return {
    push: (chunk) => {
      if (size < maxBytes) chunks.push(chunk.subarray(0, maxBytes - size));
      size += chunk.length;
      return size <= maxBytes;
    },
    text: () => Buffer.concat(chunks).toString('utf8'),
  };
}
