import type { BranchEniProbeRules } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';

/**
 * Adds (or removes) the AWS branch ENI probe rules of a pod's IPs and logs each outcome on the pod's
 * logger; a no-op without `branchEni` (the setting off). Failures are logged, never thrown: as
 * upstream, the pod is enrolled anyway and only its kubelet probes are at risk; a removal that fails
 * is logged at debug (the rules may be gone already).
 */
export async function syncBranchEniProbeRules(
  branchEni: BranchEniProbeRules | undefined,
  action: 'add' | 'remove',
  ips: readonly string[],
  log: Logger,
): Promise<void> {
  if (branchEni === undefined) return;
  const outcomes = action === 'add' ? await branchEni.addPod(ips) : await branchEni.removePod(ips);
  for (const o of outcomes) {
    const fields = { ip: o.ip, table: o.route.table, veth: o.route.veth, iifPriority: o.route.iifPriority };
    if (o.error === undefined) {
      log.info(action === 'add' ? 'branch ENI pod: probe traffic routed over its veth' : 'branch ENI pod: probe rules removed', fields);
    } else if (action === 'add') {
      log.error("failed to add branch ENI probe rules; the pod's kubelet probes may fail", { ...fields, error: o.error });
    } else {
      log.debug('failed to remove branch ENI probe rules', { ...fields, error: o.error });
    }
  }
}
