import { execFile } from 'node:child_process';

export interface CommandResult {
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  input?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** Resolve with the output even when the command exits non-zero. */
  allowFailure?: boolean;
}

export class CommandError extends Error {
  readonly argv: readonly string[];
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;

  constructor(argv: readonly string[], exitCode: number | null, stdout: string, stderr: string, cause: unknown) {
    super(`failed to run ${JSON.stringify(argv)} (exit ${exitCode}):\nstdout: ${stdout}\nstderr: ${stderr}`, { cause });
    this.name = 'CommandError';
    this.argv = argv;
    this.exitCode = exitCode;
    this.stdout = stdout;
    this.stderr = stderr;
  }
}

/** Runs argv (never a shell string) with a timeout; the failure carries both output streams. */
export function runCommand(argv: readonly string[], options: RunOptions = {}): Promise<CommandResult & { exitCode: number }> {
  const [file, ...args] = argv;
  if (file === undefined) throw new Error('runCommand needs a non-empty argv');
  return new Promise((resolveRun, reject) => {
    const child = execFile(
      file,
      args,
      { env: options.env ?? process.env, timeout: options.timeoutMs ?? 60_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
        if (error !== null && !(options.allowFailure === true && code !== null)) {
          reject(new CommandError(argv, code, stdout, stderr, error));
          return;
        }
        resolveRun({ stdout, stderr, exitCode: code ?? 0 });
      },
    );
    // A command that never reads stdin may exit before we close it.
    child.stdin?.on('error', () => {});
    child.stdin?.end(options.input ?? '');
  });
}
