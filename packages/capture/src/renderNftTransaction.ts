import { NFT_TABLES } from './nftRule.ts';
import type { NftChainSpec, NftRule } from './nftRule.ts';

function chainLine(table: string, chain: NftChainSpec): string {
  const head = `add chain inet ${table} ${chain.name}`;
  if (chain.base === undefined) return head;
  const { type, hook, priority } = chain.base;
  return `${head} { type ${type} hook ${hook} priority ${priority} ; }`;
}

/**
 * The atomic `nft -f` transaction for a sidecar rule set (SPEC 3.5): per table with rules,
 * `add table`, `flush table`, the candidate chains that own rules, then the rules in creation
 * order. An "insert at index N" becomes a plain add while N is at or past the chain's current
 * length, because nft cannot insert into an empty chain. Ends with a newline; '' when empty.
 */
export function renderNftTransaction(rules: readonly NftRule[]): string {
  const lines: string[] = [];
  for (const table of NFT_TABLES) {
    const tableRules = rules.filter((r) => r.table === table.name);
    if (tableRules.length === 0) continue;
    const owners = new Set(tableRules.map((r) => r.chain));
    lines.push(`add table inet ${table.name}`, `flush table inet ${table.name}`);
    for (const chain of table.chains) if (owners.has(chain.name)) lines.push(chainLine(table.name, chain));
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
