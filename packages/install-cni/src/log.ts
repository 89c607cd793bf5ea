import { createJsonLogger, type Logger, type LogThreshold } from '@istio-cni/handoff';

/** The daemon logs JSON lines to stdout (the container log), scope `cni-agent`. */
export function createDaemonLogger(threshold: LogThreshold = 'info', scope = 'cni-agent'): Logger {
  return createJsonLogger({ scope, threshold, sink: (line) => process.stdout.write(line + '\n') });
}
