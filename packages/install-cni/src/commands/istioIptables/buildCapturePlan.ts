import { buildSidecarIptablesRules, buildSidecarNftRules, renderIptablesRestore, renderNftTransaction } from '@istio-cni/capture';
import type { CaptureConfig } from '@istio-cni/capture';
import type { SidecarRulePlan } from '@istio-cni/dataplane';

/** The rendered rule set: iptables-restore documents per family, or one nft transaction. */
export function buildCapturePlan(config: CaptureConfig, nativeNftables: boolean): SidecarRulePlan {
  if (nativeNftables) return { backend: 'nft', script: renderNftTransaction(buildSidecarNftRules(config)) };
  const rules = buildSidecarIptablesRules(config);
  return {
    backend: 'iptables',
    documents: {
      ipv4: renderIptablesRestore(rules.v4),
      ...(config.enableIPv6 ? { ipv6: renderIptablesRestore(rules.v6) } : {}),
    },
  };
}

/**
 * Dry-run output: each document under a `#` line naming the command that would read it. Both
 * tools take `#` as a comment, so a section can be fed to its tool as is.
 */
export function formatDryRun(plan: SidecarRulePlan): string {
  if (plan.backend === 'nft') return `# nft -f -\n${plan.script}`;
  let out = `# iptables-restore --noflush\n${plan.documents.ipv4 ?? ''}`;
  if (plan.documents.ipv6 !== undefined) out += `# ip6tables-restore --noflush\n${plan.documents.ipv6}`;
  return out;
}
