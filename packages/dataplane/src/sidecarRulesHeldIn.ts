import { holdsIstioIptablesState } from './choosePodIptablesBackend.ts';
import type { CommandRunner } from './commandRunner.ts';
import type { IptablesBackend } from './detectIptablesBackend.ts';
import { isOwnNftTable, parseNftChainTables } from './nftTableList.ts';

/** The two ways this agent writes a sidecar pod's capture: iptables (either flavor) or native nftables. */
export type SidecarRuleKind = 'iptables' | 'nft';

export interface SidecarRulesHeldInOptions {
  netns: string;
  /** The node's kind (NATIVE_NFTABLES as decided at start). */
  node: SidecarRuleKind;
  /** The node's iptables binaries (detected once); rejects where there is no iptables at all. */
  iptables: () => Promise<IptablesBackend>;
  nft?: string;
}

/**
 * Which kind holds this netns's sidecar capture: the node's, unless the node's holds none of ours
 * and the other one does (a pod captured before the agent restarted with the other
 * NATIVE_NFTABLES). Such a pod keeps its kind until it is re-created: no single commit can move
 * rules between iptables and nft, so a migration in place would leave the pod uncaptured or
 * captured twice meanwhile. Reads are data only: our nft tables by exact name from nft's chain
 * JSON (one `nft -j list chains`), ISTIO_* state from `iptables-save` (one per flavor).
 */
export async function sidecarRulesHeldIn(runner: CommandRunner, options: SidecarRulesHeldInOptions): Promise<SidecarRuleKind> {
  const holds = async (kind: SidecarRuleKind): Promise<boolean> => {
    try {
      if (kind === 'iptables') return await holdsIstioIptablesState(runner, await options.iptables(), options.netns);
      const { stdout } = await runner.run([options.nft ?? 'nft', '-j', 'list', 'chains'], { netns: options.netns });
      return parseNftChainTables(stdout).some((t) => t.name.startsWith('istio-proxy-') && isOwnNftTable(t));
    } catch {
      return false; // that kind's tools are absent or cannot read this netns: nothing of ours is held there
    }
  };
  if (await holds(options.node)) return options.node;
  const other: SidecarRuleKind = options.node === 'nft' ? 'iptables' : 'nft';
  return (await holds(other)) ? other : options.node;
}
