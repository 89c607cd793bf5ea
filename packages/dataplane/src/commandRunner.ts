import { DataplaneError } from './dataplaneError.ts';

export interface RunOptions {
  /** Written to the child's stdin, then stdin is closed. */
  stdin?: string;
  /** Network namespace path (e.g. /var/run/netns/x, /proc/<pid>/ns/net) to run the command in. */
  netns?: string;
  /**
   * With `netns`: also enter the user namespace that owns it when that is not the agent's own (a pod
   * with `hostUsers: false`), where the runner can tell (`ExecCommandRunnerOptions.netnsOwner`).
   * For xtables writes: the kernel refuses an owner match written from another user namespace.
   */
  enterNetnsOwner?: boolean;
  /** Merged over the runner's base environment. */
  env?: Readonly<Record<string, string>>;
  /** Kill the command (SIGKILL) after this many milliseconds. */
  timeoutMs?: number;
}

export interface CommandResult {
  stdout: string;
  stderr: string;
}

/** Runs one program with an argv array; never through a shell. Rejects with `CommandError`. */
export interface CommandRunner {
  run(argv: readonly string[], options?: RunOptions): Promise<CommandResult>;
}

// xtables_exittype from iptables' include/xtables.h; upstream istio maps them the same way.
const xtablesExitMessages: Readonly<Record<number, string>> = {
  1: 'other problem',
  2: 'parameter problem',
  3: 'version problem',
  4: 'resource problem',
};

/** Human meaning of an iptables/ip6tables exit status, or undefined for other codes. */
export function xtablesExitMessage(exitCode: number): string | undefined {
  return xtablesExitMessages[exitCode];
}

function isXtablesProgram(program: string): boolean {
  const base = program.slice(program.lastIndexOf('/') + 1);
  return /^(ip6?tables|xtables)/.test(base);
}

export interface CommandErrorDetails {
  argv: readonly string[];
  netns?: string;
  exitCode: number | null;
  signal?: string | null;
  stdout: string;
  stderr: string;
}

/** A command that ran and failed (non-zero exit, signal or timeout) or could not be started. */
export class CommandError extends DataplaneError {
  readonly argv: readonly string[];
  readonly netns: string | undefined;
  readonly exitCode: number | null;
  readonly stdout: string;
  readonly stderr: string;

  constructor(
    code:
      | 'ERR_DATAPLANE_COMMAND_FAILED'
      | 'ERR_DATAPLANE_COMMAND_TIMEOUT'
      | 'ERR_DATAPLANE_COMMAND_NOT_FOUND'
      | 'ERR_DATAPLANE_OUTPUT_TOO_LARGE',
    details: CommandErrorDetails,
    options?: { cause?: unknown; timeoutMs?: number; maxOutputBytes?: number },
  ) {
    super(code, describeFailure(code, details, options), options);
    this.name = 'CommandError';
    this.argv = details.argv;
    this.netns = details.netns;
    this.exitCode = details.exitCode;
    this.stdout = details.stdout;
    this.stderr = details.stderr;
  }
}

/** How much of a command's stderr an error message quotes: what a tenant's netns makes it print stays a line, not a page. */
export const STDERR_QUOTED_CHARS = 2048;

function describeFailure(
  code: string,
  d: CommandErrorDetails,
  options: { timeoutMs?: number; maxOutputBytes?: number } | undefined,
): string {
  const where = d.netns === undefined ? '' : ` in netns ${JSON.stringify(d.netns)}`;
  const what = `failed to run ${JSON.stringify(d.argv.join(' '))}${where}`;
  const stderr = d.stderr.trim();
  const quoted = stderr.length > STDERR_QUOTED_CHARS ? `${stderr.slice(0, STDERR_QUOTED_CHARS)}… (${stderr.length} characters)` : stderr;
  const tail = quoted === '' ? '' : `: ${quoted}`;
  if (code === 'ERR_DATAPLANE_COMMAND_NOT_FOUND') return `${what}: program not found`;
  if (code === 'ERR_DATAPLANE_COMMAND_TIMEOUT') return `${what}: timed out after ${options?.timeoutMs ?? '?'} ms${tail}`;
  if (code === 'ERR_DATAPLANE_OUTPUT_TOO_LARGE') {
    return `${what}: printed more than ${options?.maxOutputBytes ?? '?'} bytes; stopped and not read (a partial read-back is never acted on)`;
  }
  if (d.exitCode === null) return `${what}: killed by ${d.signal ?? 'signal'}${tail}`;
  const program = d.argv[0] ?? '';
  const meaning = isXtablesProgram(program) ? xtablesExitMessage(d.exitCode) : undefined;
  const status = meaning === undefined ? `exit code ${d.exitCode}` : `exit code ${d.exitCode} (${meaning})`;
  return `${what}: ${status}${tail}`;
}
