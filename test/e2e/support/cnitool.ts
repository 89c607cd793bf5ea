import { rigBinary } from './rigPaths.ts';
import { runCommand, type CommandResult } from './runCommand.ts';

export type CnitoolCommand = 'add' | 'check' | 'del' | 'gc' | 'status';

export interface CnitoolOptions {
  /** NETCONFPATH: the directory holding the conflist. */
  confDir: string;
  /** CNI_PATH: where the plugins live. */
  binDir: string;
  /** CNI_IFNAME; cnitool defaults to eth0. */
  ifName?: string;
  /** CNI_ARGS, e.g. `K8S_POD_NAMESPACE=x;K8S_POD_NAME=y`. */
  args?: string;
  /** CAP_ARGS: runtime config such as portMappings or cni.dev/valid-attachments. */
  capabilityArgs?: Record<string, unknown>;
  /** CNI_CONTAINERID; cnitool derives one from the netns path otherwise. */
  containerId?: string;
  allowFailure?: boolean;
}

/** Runs the rig's cnitool against one network of a scratch conf dir. */
export function runCnitool(
  command: CnitoolCommand,
  network: string,
  netnsPath: string,
  options: CnitoolOptions,
): Promise<CommandResult & { exitCode: number }> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    NETCONFPATH: options.confDir,
    CNI_PATH: options.binDir,
  };
  if (options.ifName !== undefined) env.CNI_IFNAME = options.ifName;
  if (options.args !== undefined) env.CNI_ARGS = options.args;
  if (options.capabilityArgs !== undefined) env.CAP_ARGS = JSON.stringify(options.capabilityArgs);
  if (options.containerId !== undefined) env.CNI_CONTAINERID = options.containerId;
  return runCommand([rigBinary('cnitool'), command, network, netnsPath], {
    env,
    allowFailure: options.allowFailure ?? false,
    timeoutMs: 60_000,
  });
}
