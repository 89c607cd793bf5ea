import { PLUGIN_EVENT_SOCKET, VERSION, runDirPath, type Logger } from '@istio-cni/handoff';
import { startHandoffServer } from './agent/handoffServer.ts';
import { skipAllHandler } from './agent/skipAllHandler.ts';

export interface DaemonOptions {
  runDir: string;
  logger: Logger;
}

/** Runs until `signal` aborts, then shuts down cleanly. */
export async function runDaemon(opts: DaemonOptions, signal: AbortSignal): Promise<void> {
  const { logger } = opts;
  logger.info('install-cni starting', { version: VERSION, runDir: opts.runDir });
  const handoff = await startHandoffServer({
    socketPath: runDirPath(opts.runDir, PLUGIN_EVENT_SOCKET),
    handler: skipAllHandler,
    logger,
  });
  await new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
  logger.info('install-cni shutting down', { reason: String(signal.reason ?? 'signal') });
  await handoff.close();
  logger.info('install-cni stopped');
}
