import { Command, Option } from 'commander';
import { errorMessage } from '@istio-cni/cni';
import { PLUGIN_EVENT_SOCKET, postJson, runDirPath } from '@istio-cni/handoff';
import {
  DOCTOR_PATH,
  DOCTOR_SCHEMA_VERSION,
  daemonProblems,
  doctorExitCode,
  type DaemonState,
  type DoctorReport,
  nodeProblems,
  renderDoctorText,
} from '../doctor/doctorReport.ts';
import { checkNode } from '../doctor/nodeChecks.ts';
import { resolveSettings } from '../settings/settings.ts';

export interface DoctorOptions {
  env: Record<string, string | undefined>;
  /** `namespace/name`: that pod only, in full. */
  pod?: string;
  timeoutMs?: number;
}

async function askDaemon(socket: string, pod: string | undefined, timeoutMs: number): Promise<DaemonState | { error: string }> {
  try {
    const res = await postJson(socket, DOCTOR_PATH, pod === undefined ? {} : { pod }, timeoutMs);
    if (res.status !== 200) return { error: `${socket} answered ${res.status}: ${res.body.slice(0, 200)}` };
    return JSON.parse(res.body) as DaemonState;
  } catch (err) {
    return { error: errorMessage(err) };
  }
}

/**
 * The node checks made here (they answer with the daemon down), then the daemon's view over its
 * root-only hand-off socket: installer state, backend, ztunnel, and every pod checked now.
 */
export async function runDoctor(options: DoctorOptions): Promise<DoctorReport> {
  const settings = resolveSettings({}, options.env);
  const socket = runDirPath(settings.cniAgentRunDir, PLUGIN_EVENT_SOCKET);
  const [node, daemon] = await Promise.all([checkNode(settings), askDaemon(socket, options.pod, options.timeoutMs ?? 60_000)]);
  const problems = nodeProblems(node);
  let daemonPart: DoctorReport['daemon'];
  if ('error' in daemon) {
    daemonPart = { reachable: false, error: daemon.error };
    problems.push(`daemon unreachable: ${daemon.error}`);
  } else {
    daemonPart = { reachable: true, ...daemon };
    problems.push(...daemonProblems(daemon));
    if (options.pod !== undefined && !daemon.pods.some((p) => p.pod === options.pod)) {
      problems.push(`${options.pod}: not a pod this agent handles`);
    }
  }
  return { schemaVersion: DOCTOR_SCHEMA_VERSION, ok: problems.length === 0, node, daemon: daemonPart, problems };
}

export function doctorCommand(): Command {
  return new Command('doctor')
    .description('check this node and every pod the daemon manages; exit 0 all agree, 1 something is wrong, 2 daemon unreachable')
    .argument('[pod]', 'one pod, as NAMESPACE/NAME, shown in full')
    .addOption(new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text'))
    .action(async (pod: string | undefined, opts: { output: 'text' | 'json' }) => {
      if (pod !== undefined && !/^[^/]+\/[^/]+$/.test(pod)) throw new Error(`pod ${JSON.stringify(pod)}: want NAMESPACE/NAME`);
      const report = await runDoctor({ env: process.env, ...(pod === undefined ? {} : { pod }) });
      process.stdout.write(opts.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : renderDoctorText(report, pod));
      process.exitCode = doctorExitCode(report);
    });
}
