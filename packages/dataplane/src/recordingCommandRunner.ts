import type { CommandResult, CommandRunner, RunOptions } from './commandRunner.ts';

export interface RecordedCall {
  argv: readonly string[];
  options: RunOptions;
}

/** Decides what a recorded call returns: a result, an error to reject with, or undefined for empty success. */
export type RecordingResponder = (call: RecordedCall) => CommandResult | Error | undefined;

export interface RecordingCommandRunner extends CommandRunner {
  /** Every call, in order. */
  readonly calls: readonly RecordedCall[];
  /**
   * The calls as text, upstream dry-run style: one line per command (argv joined by spaces),
   * followed by the lines of its stdin when it had one.
   */
  lines(): string[];
}

/**
 * Executes nothing: records every call and answers from `respond` (default: empty success).
 * Used by unit tests and for dry-run, where the recorded lines are the output.
 */
export function createRecordingCommandRunner(respond: RecordingResponder = () => undefined): RecordingCommandRunner {
  const calls: RecordedCall[] = [];
  return {
    calls,
    async run(argv, options = {}) {
      const call = { argv: [...argv], options: { ...options } };
      calls.push(call);
      const answer = respond(call);
      if (answer instanceof Error) throw answer;
      return answer ?? { stdout: '', stderr: '' };
    },
    lines() {
      return calls.flatMap((c) => {
        const head = c.argv.join(' ');
        if (c.options.stdin === undefined) return [head];
        return [head, ...c.options.stdin.split('\n').filter((l) => l !== '')];
      });
    },
  };
}
