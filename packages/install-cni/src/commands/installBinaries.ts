import { Command, Option } from 'commander';
import type { Logger } from '@istio-cni/handoff';
import { copyBinaries } from '../installer/copyBinaries.ts';
import { checkInstallerPaths } from '../settings/checkPaths.ts';
import { parseList } from '../settings/parseValues.ts';
import type { Env } from '../settings/settings.ts';

export interface InstallBinariesOptions {
  cniBinSourceDir?: string;
  cniBinTargetDirs?: string;
}

/** Source and target dirs from flags, then env, then defaults (same names as the daemon). */
export function binaryDirs(opts: InstallBinariesOptions, env: Env): { sourceDir: string; targetDirs: string[] } {
  return {
    sourceDir: opts.cniBinSourceDir ?? env.CNI_BIN_SOURCE_DIR ?? '/opt/cni/bin',
    targetDirs: parseList(opts.cniBinTargetDirs ?? env.CNI_BIN_TARGET_DIRS ?? '/host/opt/cni/bin'),
  };
}

/** Copies the plugin into the target dirs once (for clusters that run it as an init container). */
export async function installBinaries(opts: InstallBinariesOptions, env: Env, logger: Logger): Promise<string[]> {
  const { sourceDir, targetDirs } = binaryDirs(opts, env);
  await checkInstallerPaths({ cniBinSourceDir: sourceDir, cniBinTargetDirs: targetDirs, mountedCniNetDir: '/' });
  const names = await copyBinaries({ sourceDir, targetDirs, logger });
  logger.info('installed binaries', { names: [...names], targetDirs });
  return [...names];
}

export function installBinariesCommand(logger: () => Logger): Command {
  return new Command('install-binaries')
    .description('copy the istio-cni plugin into the CNI bin dirs and exit')
    .addOption(new Option('--cni-bin-source-dir <dir>', 'directory holding the plugin (env CNI_BIN_SOURCE_DIR)'))
    .addOption(new Option('--cni-bin-target-dirs <dirs>', 'comma-separated target dirs (env CNI_BIN_TARGET_DIRS)'))
    .action(async (opts: InstallBinariesOptions) => {
      await installBinaries(opts, process.env, logger());
    });
}
