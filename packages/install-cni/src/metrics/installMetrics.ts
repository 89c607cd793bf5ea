import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { InstallMetrics, InstallResult } from '../installer/installer.ts';

export interface DaemonMetrics extends InstallMetrics {
  registry: Registry;
}

/**
 * The installer's metrics under upstream's names (`cni/pkg/install/monitoring.go`). prom-client appends no suffix, so
 * the counter is literally `istio_cni_installs_total`, as upstream's exporter emits it. One
 * registry per daemon (not the global one) so several daemons can live in one test process.
 */
export function createMetrics(options: { processMetrics?: boolean } = {}): DaemonMetrics {
  const registry = new Registry();
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });
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
