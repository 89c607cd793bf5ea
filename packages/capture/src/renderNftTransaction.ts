import { SIDECAR_NFT_LAYOUT } from './nftRule.ts';
import type { NftChainSpec, NftLayout, NftRule } from './nftRule.ts';

function chainLine(table: string, chain: NftChainSpec): string {
  const head = `add chain inet ${table} ${chain.name}`;
  if (chain.base === undefined) return head;
  const { type, hook, priority } = chain.base;
  return `${head} { type ${type} hook ${hook} priority ${priority} ; }`;
}

/** Chains named right after a `jump` fragment (upstream splits the rule text on whitespace). */
function jumpTargets(rules: readonly NftRule[]): Set<string> {
  const targets = new Set<string>();
  for (const rule of rules) {
    const words = rule.args.join(' ').split(/\s+/);
    for (let i = 0; i + 1 < words.length; i++) if (words[i] === 'jump') targets.add(words[i + 1] ?? '');
  }
  return targets;
}

/**
 * The atomic `nft -f` transaction for a rule set (as upstream's nftables code): per table with rules,
 * `add table`, `flush table`, the candidate chains that own rules (plus, when the layout says
 * so, the chains a `jump` targets), then the rules in creation order. An "insert at index N"
 * becomes a plain add while N is at or past the chain's current length, because nft cannot insert
 * into an empty chain (ambient rule sets never insert). Ends with a newline; '' when empty.
 */
export function renderNftTransaction(rules: readonly NftRule[], layout: NftLayout = SIDECAR_NFT_LAYOUT): string {
  const lines: string[] = [];
  for (const table of layout.tables) {
    const tableRules = rules.filter((r) => r.table === table.name);
    if (tableRules.length === 0) continue;
    const declared = new Set(tableRules.map((r) => r.chain));
    if (layout.declareJumpTargets) for (const target of jumpTargets(tableRules)) declared.add(target);
    lines.push(`add table inet ${table.name}`, `flush table inet ${table.name}`);
    for (const chain of table.chains) if (declared.has(chain.name)) lines.push(chainLine(table.name, chain));
    const counts = new Map<string, number>();
    for (const rule of tableRules) {
      const count = counts.get(rule.chain) ?? 0;
      const text = rule.args.join(' ');
      if (rule.index !== undefined && rule.index < count) {
        lines.push(`insert rule inet ${table.name} ${rule.chain} index ${rule.index} ${text}`);
      } else {
        lines.push(`add rule inet ${table.name} ${rule.chain} ${text}`);
      }
      counts.set(rule.chain, count + 1);
    }
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}
