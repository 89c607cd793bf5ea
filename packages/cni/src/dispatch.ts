import { cmdArgsFromEnv, type CmdArgs } from './cmdArgs.ts';
import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goMarshal, goMarshalIndent } from './goJson.ts';
import { goQuote, goQuoteList } from './goText.ts';
import { parseNetConf, type NetConf } from './parseNetConf.ts';
import { versionAtLeast } from './parseVersion.ts';
import { decodeConfigVersion, validateSkelConfig } from './skelConfig.ts';
import { LATEST_VERSION, SUPPORTED_VERSIONS, versionInfo } from './versions.ts';
import { errorMessage } from './errorMessage.ts';

/** A plugin's command handlers. */
export interface PluginFuncs {
  /** Returns the result object to print (already encoded for the config's version). */
  add(args: CmdArgs, conf: NetConf): Promise<Record<string, unknown>>;
  del(args: CmdArgs, conf: NetConf): Promise<void>;
  check(args: CmdArgs, conf: NetConf): Promise<void>;
  gc(args: CmdArgs, conf: NetConf): Promise<void>;
  status(args: CmdArgs, conf: NetConf): Promise<void>;
}

export interface DispatchOutcome {
  stdout: string;
  stderr: string;
  exitCode: 0 | 1;
}

export interface DispatchOptions {
  /**
   * skel's post-ADD/DEL safety check: true when `netns` is the plugin's own
   * network namespace (then the call fails with code 8). Needs the filesystem,
   * so it is injected; without it the check is skipped.
   */
  isPluginNetns?: (netns: string) => boolean | Promise<boolean>;
}

type Handler<T> = (args: CmdArgs, conf: NetConf) => Promise<T>;

function toCniError(e: unknown): CniError {
  if (e instanceof CniError) return e;
  // Message only: a stack trace is never part of the wire format.
  const msg = errorMessage(e);
  return new CniError(ErrorCode.Internal, msg);
}

function decodeVersionOrFail(stdin: Buffer): string {
  try {
    return decodeConfigVersion(stdin);
  } catch (e) {
    throw new CniError(ErrorCode.DecodingFailure, (e as Error).message);
  }
}

function atLeastOrFail(version: string, other: string): boolean {
  try {
    return versionAtLeast(version, other);
  } catch (e) {
    throw new CniError(ErrorCode.DecodingFailure, (e as Error).message);
  }
}

/** skel's checkVersionAndCall: the config version must be one we support, then the handler runs. */
async function checkVersionAndCall<T>(args: CmdArgs, handler: Handler<T>): Promise<T> {
  const configVersion = decodeVersionOrFail(args.stdin);
  if (!SUPPORTED_VERSIONS.includes(configVersion)) {
    throw new CniError(
      ErrorCode.IncompatibleVersion,
      'incompatible CNI versions',
      `config is ${goQuote(configVersion)}, plugin supports ${goQuoteList(SUPPORTED_VERSIONS)}`,
    );
  }
  const conf = parseNetConf(args.stdin);
  return handler(args, conf);
}

/** CHECK, GC and STATUS: refused below `minimum`, then as checkVersionAndCall. */
async function gatedCall(args: CmdArgs, name: string, minimum: string, handler: Handler<void>): Promise<void> {
  const configVersion = decodeVersionOrFail(args.stdin);
  if (!atLeastOrFail(configVersion, minimum)) {
    throw new CniError(ErrorCode.IncompatibleVersion, `config version does not allow ${name}`);
  }
  for (const pluginVersion of SUPPORTED_VERSIONS) {
    if (atLeastOrFail(pluginVersion, configVersion)) {
      await checkVersionAndCall(args, handler);
      return;
    }
  }
  throw new CniError(ErrorCode.IncompatibleVersion, `plugin version does not allow ${name}`);
}

async function checkNetns(args: CmdArgs, options: DispatchOptions): Promise<void> {
  const override = args.netnsOverride;
  if (override.toUpperCase() === 'TRUE' || override === '1') return;
  if (options.isPluginNetns === undefined || args.netns === '') return;
  if (await options.isPluginNetns(args.netns)) {
    throw new CniError(ErrorCode.InvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same");
  }
}

function configVersionForErrors(stdin: Buffer, command: string): string {
  if (command === 'VERSION') return LATEST_VERSION;
  try {
    return decodeConfigVersion(stdin);
  } catch {
    return LATEST_VERSION;
  }
}

/**
 * The reference skel's dispatch, as a pure function of env + stdin. Never throws;
 * any thrown error becomes a CNI error JSON on stdout (non-CniError → code 999,
 * message only, never a stack trace).
 *
 * Output framing follows the reference library: results and errors are
 * pretty-printed with 4 spaces and no trailing newline; VERSION is compact
 * JSON plus a newline. The error object also carries `cniVersion` (the
 * config's when it can be read, else LATEST_VERSION), as the spec asks.
 */
export async function dispatch(
  env: Record<string, string | undefined>,
  stdin: Buffer,
  funcs: PluginFuncs,
  about: string,
  options: DispatchOptions = {},
): Promise<DispatchOutcome> {
  const command = env['CNI_COMMAND'] ?? '';
  try {
    let parsed: ReturnType<typeof cmdArgsFromEnv>;
    try {
      parsed = cmdArgsFromEnv(env, stdin);
    } catch (e) {
      const err = toCniError(e);
      if (err.code === ErrorCode.InvalidEnvironment && command === '' && about !== '') {
        const stderr = `${about}\nCNI protocol versions supported: ${SUPPORTED_VERSIONS.join(', ')}\n`;
        return { stdout: '', stderr, exitCode: 0 };
      }
      throw err;
    }
    const { args } = parsed;
    if (command !== 'VERSION') validateSkelConfig(args.stdin);

    let stdout = '';
    switch (command) {
      case 'ADD': {
        const result = await checkVersionAndCall(args, funcs.add.bind(funcs));
        await checkNetns(args, options);
        if (result !== undefined && result !== null) stdout = goMarshalIndent(result);
        break;
      }
      case 'DEL':
        await checkVersionAndCall(args, funcs.del.bind(funcs));
        await checkNetns(args, options);
        break;
      case 'CHECK':
        await gatedCall(args, 'CHECK', '0.4.0', funcs.check.bind(funcs));
        break;
      case 'GC':
        await gatedCall(args, 'GC', '1.1.0', funcs.gc.bind(funcs));
        break;
      case 'STATUS':
        await gatedCall(args, 'STATUS', '1.1.0', funcs.status.bind(funcs));
        break;
      case 'VERSION':
        stdout = goMarshal(versionInfo()) + '\n';
        break;
      default:
        throw new CniError(ErrorCode.InvalidEnvironment, `unknown CNI_COMMAND: ${command}`);
    }
    return { stdout, stderr: '', exitCode: 0 };
  } catch (e) {
    const err = toCniError(e);
    let version = LATEST_VERSION;
    try {
      version = configVersionForErrors(stdin, command);
    } catch {
      // keep LATEST_VERSION
    }
    return { stdout: goMarshalIndent(err.toJSON(version)), stderr: '', exitCode: 1 };
  }
}
