import type { BranchEniRoute } from './branchEniRoute.ts';
import type { PodAddress } from './podAddress.ts';

/** What aws-vpc-cni gives a regular veth pod's `to <pod> lookup main` rule; upstream reuses it. */
export const BRANCH_ENI_FORWARD_PRIORITY = 512;
const LOCAL_TABLE = 255;

/** The selectors of one `ip rule`, after `ip -4|-6 rule add|del`. */
export type IpRuleSelector = readonly string[];

export interface BranchEniRulePlan {
  /** `to <pod>/32 lookup <table> priority 512`: the host reaches the pod over its veth, not the VPC fabric. */
  forward: IpRuleSelector;
  /**
   * `iif <veth> lookup local priority <aws-vpc-cni's iif priority - 1>`: replies from the pod are delivered
   * on the node (conntrack, kubelet) before aws-vpc-cni's rule sends them back to the VPC.
   */
  return: IpRuleSelector;
}

/** The two rules upstream `addBranchENIRules` adds for a branch ENI pod's IP (and `delBranchENIRules` removes). */
export function planBranchEniRules(pod: PodAddress, route: BranchEniRoute): BranchEniRulePlan {
  const bits = pod.family === 4 ? 32 : 128;
  return {
    forward: ['to', `${pod.address}/${bits}`, 'lookup', String(route.table), 'priority', String(BRANCH_ENI_FORWARD_PRIORITY)],
    return: ['iif', route.veth, 'lookup', String(LOCAL_TABLE), 'priority', String(Math.max(route.iifPriority - 1, 0))],
  };
}

/** `ip -4 rule add …` (or `-6`, `del`). */
export function ipRuleArgv(ip: string, family: 4 | 6, verb: 'add' | 'del', selector: IpRuleSelector): string[] {
  return [ip, `-${family}`, 'rule', verb, ...selector];
}
