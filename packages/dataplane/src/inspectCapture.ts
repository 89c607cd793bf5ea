import { canonicalIptablesState, readIptablesState } from './applyIptablesRules.ts';
import { canonicalNftTables, readNftTables } from './applyNftRules.ts';
import type { SidecarCaptureDeps, SidecarRulePlan } from './applySidecarCapture.ts';
import { compareIptablesCapture, compareNftCapture, type Drift, type IptablesCaptureState } from './captureDrift.ts';
import type { IptablesBackend, IptablesFamily } from './detectIptablesBackend.ts';

export interface InspectCaptureOptions {
  netns: string;
  /** The pod's rendered plan; `undefined` for a pod outside the mesh (nothing of ours may be there). */
  plan: SidecarRulePlan | undefined;
  /** Where rules live: native nftables, or these iptables binaries. */
  backend: { kind: 'nft' } | { kind: 'iptables'; iptables: IptablesBackend };
  /** Owned nft tables start with this (`istio-proxy-` for sidecar rules; `istio-` for "anything of ours"). */
  nftTablePrefix?: string;
}

/**
 * Reads a pod netns and compares it with its plan (`compareIptablesCapture` / `compareNftCapture`).
 * Costs one read per family (`iptables-save`) or one `nft list ruleset`; the plan's
 * kernel-canonical form comes from the cache after the first pod with that plan.
 */
export async function inspectCapture(deps: SidecarCaptureDeps, options: InspectCaptureOptions): Promise<Drift[]> {
  const { plan, netns } = options;
  if (options.backend.kind === 'nft') {
    const nft = 'nft';
    const prefix = options.nftTablePrefix ?? (plan === undefined ? 'istio-' : 'istio-proxy-');
    const found = await readNftTables(deps.runner, nft, netns, prefix);
    if (plan === undefined) return compareNftCapture(undefined, found);
    if (plan.backend !== 'nft') throw new Error('an iptables plan cannot be compared with nftables state');
    const cache = deps.nftCanonicalCache === undefined ? {} : { canonicalCache: deps.nftCanonicalCache };
    const expected = await canonicalNftTables({ runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache }, nft, plan.script);
    return compareNftCapture(expected, found);
  }
  const iptables = options.backend.iptables;
  const found: IptablesCaptureState = {};
  if (plan === undefined) {
    found.ipv4 = await readIptablesState(deps.runner, iptables, 'ipv4', netns);
    // A node without IPv6 (no ip6tables tables, or the module absent) has nothing of ours there.
    found.ipv6 = await readIptablesState(deps.runner, iptables, 'ipv6', netns).catch(() => new Map());
    return compareIptablesCapture(undefined, found);
  }
  if (plan.backend !== 'iptables') throw new Error('an nftables plan cannot be compared with iptables state');
  const cache = deps.iptablesCanonicalCache === undefined ? {} : { canonicalCache: deps.iptablesCanonicalCache };
  const ideps = { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache };
  const expected: IptablesCaptureState = {};
  for (const family of ['ipv4', 'ipv6'] as IptablesFamily[]) {
    const document = plan.documents[family];
    if (document === undefined || document.trim() === '') continue;
    expected[family] = await canonicalIptablesState(ideps, iptables, family, document);
    found[family] = await readIptablesState(deps.runner, iptables, family, netns);
  }
  return compareIptablesCapture(expected, found);
}
