import { Command, Option } from 'commander';
import type { CommandRunner, OpenScratchNetns } from '@istio-cni/dataplane';
import { createJsonLogger } from '@istio-cni/handoff';
import { FLAG_SPECS, flagLabel, type FlagSpec } from './istioIptables/flagSpecs.ts';
import {
  resolveIstioIptablesSettings,
  type Environment,
  type GivenFlag,
  type IstioIptablesSettings,
} from './istioIptables/resolveIstioIptablesSettings.ts';
import { checkNetnsFile, lookupUidInPasswd, readBoundedTextFile } from './istioIptables/systemAccess.ts';
import { UsageError } from './istioIptables/usageError.ts';

/** Replaceable process access; tests pass fakes, `install-cni` uses the defaults. */
export interface IstioIptablesCommandDeps {
  env?: Environment;
  runner?: CommandRunner;
  openScratchNetns?: OpenScratchNetns;
  readTextFile?: (path: string) => Promise<string>;
  checkNetns?: (path: string) => Promise<void>;
  lookupUid?: (name: string) => string | undefined;
}

/** Usage errors (bad flag values) exit 2; failures while applying exit 1. */
export const USAGE_EXIT_CODE = 2;
export const FAILURE_EXIT_CODE = 1;

const USAGE_HINT = "(run 'install-cni istio-iptables --help' for usage)";

function optionFor(spec: FlagSpec, long: string, description: string): Option {
  const short = long === spec.long && spec.short !== undefined ? `-${spec.short}, ` : '';
  const value = spec.kind === 'bool' ? '[bool]' : `<${spec.valueName ?? 'value'}>`;
  return new Option(`${short}--${long} ${value}`, description);
}

function envHelp(spec: FlagSpec): string {
  return spec.env.length === 0 ? '' : ` (env ${spec.env.join(', ')})`;
}

/**
 * `install-cni istio-iptables`: upstream istio-iptables' flags and environment, plus `--pod FILE`
 * (settings from a pod manifest, as the CNI plugin derives them) and `--netns PATH`.
 */
export function istioIptablesCommand(deps: IstioIptablesCommandDeps = {}): Command {
  const env = deps.env ?? process.env;
  const cmd = new Command('istio-iptables')
    .description('Set up sidecar traffic capture (iptables or nftables) in a network namespace')
    .showHelpAfterError(USAGE_HINT)
    .allowExcessArguments(false);
  const attributes = new Map<string, { spec: FlagSpec; long: string; attribute: string }>();
  for (const spec of FLAG_SPECS) {
    for (const long of [spec.long, ...(spec.aliases ?? [])]) {
      const description = long === spec.long ? `${spec.description}${envHelp(spec)}` : `alias of --${spec.long}`;
      const option = optionFor(spec, long, description);
      cmd.addOption(option);
      attributes.set(long, { spec, long, attribute: option.attributeName() });
    }
  }
  cmd.action(async (_opts: unknown, command: Command) => {
    const write = command.configureOutput().writeOut ?? ((s: string) => process.stdout.write(s));
    const writeErr = command.configureOutput().writeErr ?? ((s: string) => process.stderr.write(s));
    const usage = (err: UsageError): never =>
      command.error(`error: ${err.message}`, { exitCode: USAGE_EXIT_CODE, code: 'istio-iptables.usage' });

    const given = new Map<string, GivenFlag>();
    for (const { spec, long, attribute } of attributes.values()) {
      if (command.getOptionValueSource(attribute) !== 'cli') continue;
      const value = command.getOptionValue(attribute) as string | true;
      const spelling = long === spec.long ? flagLabel(spec) : `--${long}`;
      const previous = given.get(spec.long);
      if (previous !== undefined) usage(new UsageError(spelling, undefined, `given together with ${previous.spelling}`));
      given.set(spec.long, { value, spelling });
    }
    let settings: IstioIptablesSettings;
    try {
      settings = resolveIstioIptablesSettings({ given, env, lookupUid: deps.lookupUid ?? ((name) => lookupUidInPasswd(name)) });
    } catch (err) {
      if (err instanceof UsageError) return usage(err);
      throw err;
    }
    const logger = createJsonLogger({ scope: 'istio-iptables', threshold: settings.logThreshold, sink: (line) => writeErr(`${line}\n`) });
    try {
      // Loaded here, not with the daemon: the rule code and the dataplane are this command's alone.
      const [{ runIstioIptables }, { createExecCommandRunner, createScratchNetnsOpener }] = await Promise.all([
        import('./istioIptables/runIstioIptables.ts'),
        import('@istio-cni/dataplane'),
      ]);
      await runIstioIptables(settings, {
        runner: deps.runner ?? createExecCommandRunner({ env }),
        openScratchNetns: deps.openScratchNetns ?? createScratchNetnsOpener(),
        readTextFile: deps.readTextFile ?? readBoundedTextFile,
        checkNetns: deps.checkNetns ?? checkNetnsFile,
        ownNetns: `/proc/${process.pid}/ns/net`,
        logger,
        write,
      });
    } catch (err) {
      if (err instanceof UsageError) return usage(err);
      // A failure while applying is not a usage problem: no help hint.
      command.showHelpAfterError(false);
      command.error(`error: failed to set up sidecar capture: ${(err as Error).message}`, {
        exitCode: FAILURE_EXIT_CODE,
        code: 'istio-iptables.failed',
      });
    }
  });
  return cmd;
}
