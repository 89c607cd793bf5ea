import { Counter, type Registry } from 'prom-client';

export type RepairType = 'repair' | 'delete' | 'label';
export type RepairResult = 'success' | 'fail' | 'skip';

export interface RepairMetrics {
  podRepaired(type: RepairType, result: RepairResult): void;
}

/** `istio_cni_repair_pods_repaired_total{type,result}` (upstream `cni/pkg/repair`) on the daemon's registry. */
export function createRepairMetrics(registry: Registry): RepairMetrics {
  const existing = registry.getSingleMetric('istio_cni_repair_pods_repaired_total');
  const counter =
    existing instanceof Counter
      ? (existing as Counter<'type' | 'result'>)
      : new Counter({
          name: 'istio_cni_repair_pods_repaired_total',
          help: 'Total number of pods repaired by repair controller',
          labelNames: ['type', 'result'] as const,
          registers: [registry],
        });
  return { podRepaired: (type, result) => counter.inc({ type, result }) };
}
