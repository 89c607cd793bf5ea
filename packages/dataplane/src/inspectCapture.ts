import { canonicalIptablesState, readIptablesState } from './applyIptablesRules.ts';
import { canonicalNftTables, readNftTables } from './applyNftRules.ts';
import type { SidecarCaptureDeps, SidecarRulePlan } from './applySidecarCapture.ts';
import { compareIptablesCapture, compareNftCapture, type Drift, type IptablesCaptureState } from './captureDrift.ts';
import { choosePodIptablesBackend } from './choosePodIptablesBackend.ts';
import type { IptablesBackend, IptablesFamily } from './detectIptablesBackend.ts';

export interface InspectCaptureOptions {
  netns: string;
  /** The pod's rendered plan; `undefined` for a pod outside the mesh (nothing of ours may be there). */
  plan: SidecarRulePlan | undefined;
  /** Where rules live: native nftables, or these iptables binaries. */
  backend: { kind: 'nft' } | { kind: 'iptables'; iptables: IptablesBackend };
  /** Owned nft tables start with this (`istio-proxy-` for sidecar rules; `istio-` for "anything of ours"). */
  nftTablePrefix?: string;
  /** Where this pod's iptables rules were found in place last time (an adopted backend): read there first. */
  lastFoundIn?: IptablesBackend;
}

export interface InspectedCapture {
  drift: Drift[];
  /** The iptables backend the compared rules were read from (`undefined` with native nftables). */
  iptables?: IptablesBackend;
}

/** Whether the nf_tables generation of the netns moves with every change to what was read. */
export function readFromNfTables(inspected: InspectedCapture): boolean {
  return inspected.iptables === undefined || inspected.iptables.nfTables;
}

/**
 * The iptables families `inspectCapture` reads for a plan's documents: both for a pod outside the
 * mesh (no plan: nothing of ours may be in either), else those the plan has rules for.
 */
export function iptablesFamiliesRead(documents: Partial<Record<IptablesFamily, string>> | undefined): IptablesFamily[] {
  if (documents === undefined) return ['ipv4', 'ipv6'];
  return (['ipv4', 'ipv6'] as const).filter((family) => (documents[family] ?? '').trim() !== '');
}

/**
 * Reads a pod netns and compares it with its plan (`compareIptablesCapture` / `compareNftCapture`).
 * Costs one read per family (`iptables-save`) or one `nft list ruleset`; the plan's
 * kernel-canonical form comes from the cache after the first pod with that plan. A sidecar or
 * ambient pod's iptables rules are compared where they live: when the node's backend does not hold
 * them in place and another backend holds this netns's ISTIO_* state (`choosePodIptablesBackend`, as
 * ADD and repair choose), that backend is read instead, so a pod adopted from it is not drift.
 */
export async function inspectCapture(deps: SidecarCaptureDeps, options: InspectCaptureOptions): Promise<InspectedCapture> {
  const { plan, netns } = options;
  if (options.backend.kind === 'nft') {
    const nft = 'nft';
    const prefix = options.nftTablePrefix ?? (plan === undefined ? 'istio-' : 'istio-proxy-');
    const found = await readNftTables(deps.runner, nft, netns, prefix);
    if (plan === undefined) return { drift: compareNftCapture(undefined, found) };
    if (plan.backend !== 'nft') throw new Error('an iptables plan cannot be compared with nftables state');
    const cache = deps.nftCanonicalCache === undefined ? {} : { canonicalCache: deps.nftCanonicalCache };
    const expected = await canonicalNftTables({ runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache }, nft, plan.script);
    return { drift: compareNftCapture(expected, found) };
  }
  const node = options.backend.iptables;
  if (plan === undefined) {
    const found: IptablesCaptureState = {};
    found.ipv4 = await readIptablesState(deps.runner, node, 'ipv4', netns);
    // A node without IPv6 (no ip6tables tables, or the module absent) has nothing of ours there.
    found.ipv6 = await readIptablesState(deps.runner, node, 'ipv6', netns).catch(() => new Map());
    return { drift: compareIptablesCapture(undefined, found), iptables: node };
  }
  if (plan.backend !== 'iptables') throw new Error('an nftables plan cannot be compared with iptables state');
  const cache = deps.iptablesCanonicalCache === undefined ? {} : { canonicalCache: deps.iptablesCanonicalCache };
  const ideps = { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache };
  const compareIn = async (iptables: IptablesBackend): Promise<Drift[]> => {
    const expected: IptablesCaptureState = {};
    const found: IptablesCaptureState = {};
    for (const family of iptablesFamiliesRead(plan.documents)) {
      const document = plan.documents[family] ?? '';
      expected[family] = await canonicalIptablesState(ideps, iptables, family, document);
      found[family] = await readIptablesState(deps.runner, iptables, family, netns);
    }
    return compareIptablesCapture(expected, found);
  };
  const first = options.lastFoundIn ?? node;
  const drift = await compareIn(first);
  if (drift.length === 0 || (node.adoptable ?? []).length === 0) return { drift, iptables: first };
  const { backend: home } = await choosePodIptablesBackend(deps.runner, node, netns);
  if (home.flavor === first.flavor) return { drift, iptables: first };
  return { drift: await compareIn(home), iptables: home };
}
