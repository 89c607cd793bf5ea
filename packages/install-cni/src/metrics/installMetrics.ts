import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { InstallMetrics, InstallResult } from '../installer/installer.ts';

export interface DaemonMetrics extends InstallMetrics {
  registry: Registry;
}

/**
 * How often the event-loop delay histogram (`nodejs_eventloop_lag_{min,max,mean,p50,…}_seconds`)
 * samples. prom-client's default, 10 ms, is a native timer waking the daemon 100 times a second
 * whatever it is doing: 0.34 s of CPU per agent in 120 s of an otherwise idle fleet, 17 times
 * upstream's Go agent (docs/benchmarks.md, "Many nodes, one API server"). Once a second keeps the
 * histogram (a stall longer than a second is always caught; `nodejs_eventloop_lag_seconds` is
 * measured at every scrape) for 1 % of those wake-ups.
 */
const EVENT_LOOP_SAMPLE_MS = 1000;

/**
 * The installer's metrics under upstream's names (`cni/pkg/install/monitoring.go`). prom-client appends no suffix, so
 * the counter is literally `istio_cni_installs_total`, as upstream's exporter emits it. One
 * registry per daemon (not the global one) so several daemons can live in one test process.
 */
export function createMetrics(options: { processMetrics?: boolean } = {}): DaemonMetrics {
  const registry = new Registry();
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const installs = new Counter({
    name: 'istio_cni_installs_total',
    help: 'Total number of CNI plugins installed by the Istio CNI installer',
    labelNames: ['result'] as const,
    registers: [registry],
  });
  const ready = new Gauge({
    name: 'istio_cni_install_ready',
    help: 'Whether this node has the CNI plugin installed and ready (1) or not (0)',
    registers: [registry],
  });
  ready.set(0);
  return {
    registry,
    installResult: (result: InstallResult) => installs.inc({ result }),
    setInstallReady: (isReady: boolean) => ready.set(isReady ? 1 : 0),
  };
}
