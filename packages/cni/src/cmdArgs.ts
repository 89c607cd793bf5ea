import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { validateContainerId, validateInterfaceName } from './validateNames.ts';

export type Command = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';

export const COMMANDS: readonly Command[] = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS', 'VERSION'];

/** Everything a plugin is invoked with: the CNI_* environment and stdin. */
export interface CmdArgs {
  command: Command;
  containerId: string;
  netns: string;
  ifName: string;
  /** CNI_ARGS, unparsed (see parseK8sArgs). */
  args: string;
  /** CNI_PATH split on ':' (empty entries dropped). */
  path: string[];
  /** Raw stdin; empty for VERSION. */
  stdin: Buffer;
  /** CNI_NETNS_OVERRIDE, unparsed. */
  netnsOverride: string;
}

interface EnvVar {
  name: string;
  requiredFor: readonly string[];
  validate?: (value: string) => void;
}

// The reference skel's table, in its order: the order decides which error wins.
const ENV_VARS: readonly EnvVar[] = [
  { name: 'CNI_COMMAND', requiredFor: ['ADD', 'CHECK', 'DEL', 'GC', 'STATUS'] },
  { name: 'CNI_CONTAINERID', requiredFor: ['ADD', 'CHECK', 'DEL'], validate: validateContainerId },
  { name: 'CNI_NETNS', requiredFor: ['ADD', 'CHECK'] },
  { name: 'CNI_IFNAME', requiredFor: ['ADD', 'CHECK', 'DEL'], validate: validateInterfaceName },
  { name: 'CNI_ARGS', requiredFor: [] },
  { name: 'CNI_PATH', requiredFor: ['ADD', 'CHECK', 'DEL', 'GC', 'STATUS'] },
  { name: 'CNI_NETNS_OVERRIDE', requiredFor: [] },
];

/** Which CNI_* variables a command requires (CNI_COMMAND always). */
export function requiredEnv(command: string): string[] {
  return ENV_VARS.filter((v) => v.name === 'CNI_COMMAND' || v.requiredFor.includes(command)).map((v) => v.name);
}

/**
 * Reads the CNI_* variables like skel's getCmdArgsFromEnv: a present required
 * value is validated as soon as it is read; then all missing required names
 * are reported together as code 4. The command itself is returned unchecked.
 */
export function cmdArgsFromEnv(env: Record<string, string | undefined>, stdin: Buffer): { command: string; args: CmdArgs } {
  const values: Record<string, string> = {};
  const missing: string[] = [];
  const command = env['CNI_COMMAND'] ?? '';
  for (const v of ENV_VARS) {
    const value = env[v.name] ?? '';
    values[v.name] = value;
    const required = v.requiredFor.includes(command);
    if (value === '') {
      if (required || v.name === 'CNI_COMMAND') missing.push(v.name);
    } else if (required && v.validate !== undefined) {
      v.validate(value);
    }
  }
  if (missing.length > 0) {
    throw new CniError(ErrorCode.InvalidEnvironment, `required env variables [${missing.join(',')}] missing`);
  }
  return {
    command,
    args: {
      command: command as Command,
      containerId: values['CNI_CONTAINERID'] ?? '',
      netns: values['CNI_NETNS'] ?? '',
      ifName: values['CNI_IFNAME'] ?? '',
      args: values['CNI_ARGS'] ?? '',
      path: (values['CNI_PATH'] ?? '').split(':').filter((p) => p !== ''),
      stdin: command === 'VERSION' ? Buffer.alloc(0) : stdin,
      netnsOverride: values['CNI_NETNS_OVERRIDE'] ?? '',
    },
  };
}
