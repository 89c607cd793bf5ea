import { readFileSync } from 'node:fs';
import { CommanderError } from 'commander';
import { createRecordingCommandRunner } from '@istio-cni/dataplane';
import type { CommandRunner, RecordingCommandRunner, RecordingResponder } from '@istio-cni/dataplane';
import { istioIptablesCommand, type IstioIptablesCommandDeps } from '../src/commands/istioIptables.ts';
import { UPSTREAM_TESTDATA } from '../../../test/support/upstreamTestdata.ts';

/** Test support for the istio-iptables command tests: in-process runs and upstream golden access. */

export const TESTDATA_ROOT = UPSTREAM_TESTDATA;

export interface CommandRun {
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number;
  /** Every command the run executed (through the recording runner). */
  readonly runner: RecordingCommandRunner;
}

export interface RunOptions extends Omit<IstioIptablesCommandDeps, 'runner'> {
  /** Answers for the recording runner; default: every command succeeds with empty output. */
  readonly respond?: RecordingResponder;
  /** Use this runner instead of a recording one (real-kernel tests). */
  readonly runner?: CommandRunner;
}

/** Runs `install-cni istio-iptables <args>` in-process, output captured, exits turned into a code. */
export async function runCommand(args: readonly string[], options: RunOptions = {}): Promise<CommandRun> {
  const recording = createRecordingCommandRunner(options.respond);
  let stdout = '';
  let stderr = '';
  const cmd = istioIptablesCommand({
    env: {},
    lookupUid: () => undefined,
    ...options,
    runner: options.runner ?? recording,
  })
    .exitOverride()
    .configureOutput({ writeOut: (s) => (stdout += s), writeErr: (s) => (stderr += s) });
  let exitCode = 0;
  try {
    await cmd.parseAsync([...args], { from: 'user' });
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    exitCode = err.exitCode;
  }
  return { stdout, stderr, exitCode, runner: recording };
}

/** The documents of a dry-run, without the `#` lines naming their tools. */
export function dryRunDocuments(stdout: string): string {
  return stdout
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .join('\n');
}

/** Upstream's trimmed compare (testdata/upstream/inputs.md §0). */
export function trimmed(text: string): string {
  return text.replace(/^\s+|\s+$/g, '');
}

export function readIptablesGolden(name: string): string {
  return readFileSync(`${TESTDATA_ROOT}/tools/istio-iptables/pkg/capture/testdata/${name}.golden`, 'utf8');
}

export function readNftGolden(name: string): string {
  return readFileSync(`${TESTDATA_ROOT}/tools/istio-nftables/pkg/capture/testdata/${name}.golden`, 'utf8');
}

export function readPluginGolden(name: string): string {
  return readFileSync(`${TESTDATA_ROOT}/cni/pkg/plugin/testdata/${name}.txt.golden`, 'utf8');
}

/** An iptables golden's restore text: the recorded lines without the `iptables-save`/`ip6tables-save` probes. */
export function goldenRestoreText(golden: string): string {
  return golden
    .split('\n')
    .filter((line) => line !== 'iptables-save' && line !== 'ip6tables-save')
    .join('\n');
}
