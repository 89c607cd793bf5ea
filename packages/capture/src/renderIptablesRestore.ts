import { BUILTIN_CHAINS } from './iptablesRule.ts';
import type { IptablesRule, IptablesTable } from './iptablesRule.ts';

const TABLE_ORDER: readonly IptablesTable[] = ['filter', 'mangle', 'nat', 'raw'];

/** The rule as written in a restore document / on an `iptables` command line. */
export function iptablesRuleArgs(rule: IptablesRule): string[] {
  return rule.position === undefined ? ['-A', rule.chain, ...rule.args] : ['-I', rule.chain, String(rule.position), ...rule.args];
}

/**
 * One family's `iptables-restore --noflush` input (upstream `iptables_builder_impl.go`): tables in sorted order, each with
 * `-N` for owned chains then jump targets (first-seen order), rules in creation order, `COMMIT`.
 * Returns '' when there are no rules. Ends with a newline.
 */
export function renderIptablesRestore(rules: readonly IptablesRule[]): string {
  const lines: string[] = [];
  for (const table of TABLE_ORDER) {
    const tableRules = rules.filter((r) => r.table === table);
    if (tableRules.length === 0) continue;
    lines.push(`* ${table}`);
    const declared = new Set<string>();
    const declare = (chain: string): void => {
      if (BUILTIN_CHAINS.has(chain) || declared.has(chain)) return;
      declared.add(chain);
      lines.push(`-N ${chain}`);
    };
    for (const rule of tableRules) declare(rule.chain);
    for (const rule of tableRules) {
      const n = rule.args.length;
      if (n >= 2 && rule.args[n - 2] === '-j') declare(rule.args[n - 1] ?? '');
    }
    for (const rule of tableRules) lines.push(iptablesRuleArgs(rule).join(' '));
    lines.push('COMMIT');
  }
  return lines.length === 0 ? '' : `${lines.join('\n')}\n`;
}
