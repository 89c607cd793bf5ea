import { Counter, Histogram, type Registry } from 'prom-client';

/** How an ADD put a pod in the mesh. */
export type MeshMode = 'sidecar' | 'ambient';

export interface AgentMetrics {
  /** `code` is the CNI error code of the answer, 0 for success. */
  observe(command: string, code: number, seconds: number): void;
  /** An ADD of a pod the agent decided to capture, from its arrival to its answer. */
  observePodCapture(mode: MeshMode, code: number, seconds: number): void;
}

// Upstream's agent (cni/pkg/nodeagent/cni-watcher.go) exports no latency histogram: names and
// buckets of both histograms are ours, `result` as `istio_cni_repair_pods_repaired_total` labels it.
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25];

function result(code: number): string {
  return code === 0 ? 'success' : `error_${code}`;
}

/**
 * `istio_cni_plugin_requests_total{response_code}` as upstream `cni-watcher.go` (the HTTP status the
 * plugin got: 200 or 500), plus the latency of hand-off work per command and of each captured pod's ADD.
 */
export function createAgentMetrics(registry: Registry): AgentMetrics {
  const requests = new Counter({
    name: 'istio_cni_plugin_requests_total',
    help: 'Number of CNI plugin requests handled by the node agent, by HTTP response code.',
    labelNames: ['response_code'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'istio_cni_plugin_request_duration_seconds',
    help: 'Time the node agent spent on a CNI plugin request, by CNI command and result.',
    labelNames: ['command', 'result'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  const capture = new Histogram({
    name: 'istio_cni_pod_capture_duration_seconds',
    help:
      "Time from a pod's sandbox ADD reaching the node agent to the pod captured (sidecar: rules applied; ambient: rules " +
      'applied, ztunnel acked, probe set updated, pod annotated), by mode and result. Pods outside the mesh are not observed.',
    labelNames: ['mode', 'result'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  return {
    observe(command, code, seconds) {
      requests.inc({ response_code: code === 0 ? '200' : '500' });
      duration.observe({ command, result: result(code) }, seconds);
    },
    observePodCapture(mode, code, seconds) {
      capture.observe({ mode, result: result(code) }, seconds);
    },
  };
}

/**
 * `istio_cni_drift_total{kind,action}`: what continuous verification found (`rules_missing`,
 * `rules_changed`, `unexpected_rules`, `probe_set`, `ztunnel`, `annotation`, `not_enrolled`, `netns_replaced`,
 * `host_rules`, or `unverifiable`)
 * and what it did (`repaired`, `failed`, `reported`).
 */
export function createVerificationMetrics(registry: Registry): { drift: Counter<'kind' | 'action'>; verified: Counter<'result'> } {
  const verified = new Counter({
    name: 'istio_cni_pod_verifications_total',
    help: 'Checks of a pod against its plan by continuous verification, by first outcome (ok, drift, skipped, unverifiable).',
    labelNames: ['result'],
    registers: [registry],
  });
  const drift = new Counter({
    name: 'istio_cni_drift_total',
    help: 'Pods found by continuous verification to differ from their plan, by kind of drift and action taken.',
    labelNames: ['kind', 'action'],
    registers: [registry],
  });
  return { drift, verified };
}
