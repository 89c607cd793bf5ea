import type { Pod } from '@istio-cni/capture';
import { AmbientDataplaneError, type NetnsHandle } from '@istio-cni/dataplane';
import type { RepairInPlace } from './repairController.ts';
import { podKey } from './repairPod.ts';

export interface InPlaceRepairDeps {
  /** The netns holding the address, `undefined` if none (production: `findNetnsByIp` over the host procfs); caller closes it. */
  findNetns(podIp: string): Promise<NetnsHandle | undefined>;
  /** Throws when the found netns must not be programmed (the node's own; production: `PodNetnsGuard.check`). */
  checkNetns(netns: NetnsHandle): void;
  /** The plugin's own sidecar capture (`createSidecarCaptureManager`), so a repaired pod gets exactly its rules. */
  capture: { apply(pod: Pod, netns: string): Promise<string> };
}

/**
 * Repair in place (upstream `cni/pkg/repair`): find the running pod's netns by its IP and program the same capture
 * rules the plugin would have, iptables or nftables as configured. The pod recovers when its
 * validation init container next restarts.
 */
export function createInPlaceRepairer(deps: InPlaceRepairDeps): RepairInPlace {
  return async (pod) => {
    if (pod.spec?.hostNetwork === true) throw new Error(`pod ${podKey(pod)} uses the host network: there is no pod netns to repair`);
    const ip = pod.status?.podIP || pod.status?.podIPs?.[0]?.ip;
    if (!ip) throw new Error(`pod ${podKey(pod)} has no IP yet: cannot find its network namespace`);
    const netns = await deps.findNetns(ip);
    if (netns === undefined)
      throw new AmbientDataplaneError('ERR_AMBIENT_NETNS', `no network namespace on this node holds pod IP ${JSON.stringify(ip)}`);
    try {
      deps.checkNetns(netns);
      const outcome = await netns.use((path) => deps.capture.apply(pod, path));
      return `${netns.source} (inode ${netns.inode}, ${outcome})`;
    } finally {
      netns.close();
    }
  };
}
