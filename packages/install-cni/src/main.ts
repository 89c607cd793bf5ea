import { Command } from 'commander';
import { VERSION } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import { checkRuntimeCommand } from './commands/checkRuntime.ts';
import { doctorCommand } from './commands/doctor.ts';
import { installBinariesCommand } from './commands/installBinaries.ts';
import { istioIptablesCommand } from './commands/istioIptables.ts';
import { runDaemon } from './daemon.ts';
import { createDaemonLogger } from './log.ts';
import { registerSettingsOptions, resolveSettings, type ParsedOptions } from './settings/settings.ts';

/** SIGTERM/SIGINT become an aborted signal; a second signal exits at once. */
function shutdownSignal(): AbortSignal {
  const controller = new AbortController();
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.on(sig, () => {
      if (controller.signal.aborted) process.exit(130);
      controller.abort(sig);
    });
  }
  return controller.signal;
}

const program = new Command('install-cni')
  .description('Istio CNI node agent: installs the istio-cni plugin and handles its hand-off work')
  .version(VERSION, '--version')
  .enablePositionalOptions();

registerSettingsOptions(program).action(async (opts: ParsedOptions) => {
  const settings = resolveSettings(opts, process.env);
  const logger = createDaemonLogger(settings.logLevels.agent);
  await runDaemon({ settings, logger, ...(process.env.KUBECONFIG ? { kubeconfigPath: process.env.KUBECONFIG } : {}) }, shutdownSignal());
});

program.addCommand(installBinariesCommand(() => createDaemonLogger()));
program.addCommand(istioIptablesCommand());
program.addCommand(checkRuntimeCommand());
program.addCommand(doctorCommand());

// Exit explicitly once the command is done: long-lived handles (API watches, timers) must not
// keep a stopped daemon alive past its shutdown.
program.parseAsync(process.argv).then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    createDaemonLogger().error('install-cni failed', { error: errorMessage(err) });
    process.exit(1);
  },
);
