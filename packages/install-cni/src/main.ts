import { Command } from 'commander';
import { DEFAULT_RUN_DIR, VERSION } from '@istio-cni/handoff';
import { runDaemon } from './daemon.ts';
import { createDaemonLogger } from './log.ts';

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
  .option('--cni-agent-run-dir <dir>', 'agent run directory (env CNI_AGENT_RUN_DIR)')
  .action(async (opts: { cniAgentRunDir?: string }) => {
    const runDir = opts.cniAgentRunDir ?? process.env.CNI_AGENT_RUN_DIR ?? DEFAULT_RUN_DIR;
    await runDaemon({ runDir, logger: createDaemonLogger() }, shutdownSignal());
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  createDaemonLogger().error('install-cni failed', { error: err instanceof Error ? err.message : String(err) });
  process.exitCode = 1;
});
