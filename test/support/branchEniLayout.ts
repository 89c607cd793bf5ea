/**
 * A pod sandbox of `ambientNode.ts` re-routed the way aws-vpc-cni routes a branch ENI pod (Security
 * Groups for Pods) on the node: a VLAN link `vlan.eth.<vlan>` on the trunk ENI (here one end of a
 * veth pair: kernels without the dummy and 8021q drivers have no other link to stand in, and the
 * detection, as upstream's, looks at routes and rules, never at the link's type), a
 * routing table `100 + vlan` holding the pod's host route over its veth and a default route over the
 * VLAN link, `iif` rules from both into that table at priority 10, and no route to the pod in main.
 * Plus `net.ipv4.tcp_early_demux=0`, which AWS requires on such nodes (the node netns's own copy).
 */
import { execFileSync } from 'node:child_process';
import type { NetnsRef, PodSandbox } from './ambientNode.ts';

export interface BranchEniLayout {
  table: number;
  vlanLink: string;
  /** aws-vpc-cni's priority for its iif rules. */
  iifPriority: number;
}

function ipBatch(netns: string, lines: string[]): void {
  execFileSync('ip', ['-n', netns, '-batch', '-'], { input: [...lines, ''].join('\n'), stdio: ['pipe', 'ignore', 'pipe'] });
}

/** Sets tcp_early_demux in the node netns (per network namespace; the host's is untouched). */
export function setTcpEarlyDemux(node: NetnsRef, value: 0 | 1): void {
  execFileSync('nsenter', [`--net=${node.path}`, '--', 'sysctl', '-qw', `net.ipv4.tcp_early_demux=${value}`], { stdio: 'ignore' });
}

export function layBranchEniPod(node: NetnsRef, sandbox: PodSandbox, vlan: number): BranchEniLayout {
  const table = 100 + vlan;
  const vlanLink = `vlan.eth.${vlan}`;
  const peer = `vlanpeer.${vlan}`;
  const iifPriority = 10;
  const subnet = sandbox.ip.replace(/\.\d+$/, '.0/24');
  ipBatch(node.name, [
    `link add ${vlanLink} type veth peer name ${peer}`,
    `link set ${peer} up`,
    `link set ${vlanLink} up`,
    `route del ${subnet} dev ${sandbox.hostVeth}`,
    `route add default dev ${vlanLink} table ${table}`,
    `route add ${sandbox.ip} dev ${sandbox.hostVeth} scope link table ${table}`,
    `rule add iif ${vlanLink} table ${table} priority ${iifPriority}`,
    `rule add iif ${sandbox.hostVeth} table ${table} priority ${iifPriority}`,
  ]);
  return { table, vlanLink, iifPriority };
}

export interface IpRuleEntry {
  priority: number;
  iif?: string;
  dst?: string;
  table?: string;
}

/** `ip -N -j rule show` (IPv4) in a netns, one line per rule, for comparing whole rule lists. */
export function ipRules(netns: NetnsRef): string[] {
  const text = execFileSync('ip', ['-n', netns.name, '-N', '-j', '-4', 'rule', 'show'], { encoding: 'utf8' });
  return (JSON.parse(text) as IpRuleEntry[]).map((r) =>
    [r.priority, r.iif ? `iif ${r.iif}` : '', r.dst ? `to ${r.dst}` : '', `lookup ${r.table}`].filter((p) => p !== '').join(' '),
  );
}
