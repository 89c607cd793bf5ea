import { type IptablesState, isIstioChain, isPlainChainName, isPlainTableName, jumpTarget, ownedRules } from './iptablesState.ts';
import { parseRestoreDocument, renderRestoreDocument, type RestoreTableBlock } from './restoreDocument.ts';

/**
 * One restore document that turns `actual` into the plan: per table, delete the owned rules from
 * other chains, flush every ISTIO_* chain, delete the ISTIO_* chains the plan does not have, then
 * the planned lines (without `-N` for chains that already exist). Each table block is committed
 * atomically by iptables-restore, so no packet sees a half-removed state and the guardrail DROP
 * rules upstream installs around its multi-command reconcile are not needed.
 *
 * Nothing read back from the netns is echoed as rule text: an owned rule in another chain is deleted
 * by its position (`-D OUTPUT 3`, last first), and only tables and chains with plain names
 * (`isPlainChainName`) are named at all; a chain with any other name is not ours and is left alone
 * (verification reports it). So a tenant's comment, quote or newline cannot reach iptables-restore.
 */
export function buildIptablesReconcileDocument(plannedDocument: string, expected: IptablesState, actual: IptablesState): string {
  const planned = parseRestoreDocument(plannedDocument);
  const tables = new Set([...planned.map((b) => b.table), ...[...actual.keys()].filter(isPlainTableName)]);
  const blocks: RestoreTableBlock[] = [];
  for (const table of tables) {
    const have = actual.get(table) ?? new Map<string, string[]>();
    const want = expected.get(table) ?? new Map<string, string[]>();
    const plannedLines = planned.filter((b) => b.table === table).flatMap((b) => b.lines);
    const plannedChains = new Set(plannedLines.filter((l) => l.startsWith('-N ')).map((l) => l.slice(3).trim()));
    const lines: string[] = [];
    for (const [chain, rules] of have) {
      if (isIstioChain(chain) || !isPlainChainName(chain)) continue;
      const owned = new Set(ownedRules(chain, rules, new Set(want.get(chain) ?? [])));
      const positions = rules.flatMap((rule, i) => (owned.has(rule) ? [i + 1] : []));
      for (const position of positions.reverse()) lines.push(`-D ${chain} ${position}`);
    }
    const istioChains = [...have.keys()].filter((chain) => isIstioChain(chain) && isPlainChainName(chain));
    for (const chain of istioChains) lines.push(`-F ${chain}`);
    // A chain with an odd name is left alone, so a chain of ours it jumps to must stay (flushed).
    const heldByOdd = new Set(
      [...have].filter(([chain]) => !isPlainChainName(chain)).flatMap(([, rules]) => rules.map((r) => jumpTarget(r) ?? '')),
    );
    for (const chain of istioChains) if (!plannedChains.has(chain) && !heldByOdd.has(chain)) lines.push(`-X ${chain}`);
    for (const line of plannedLines) {
      if (line.startsWith('-N ') && have.has(line.slice(3).trim())) continue;
      lines.push(line);
    }
    if (lines.length > 0) blocks.push({ table, lines });
  }
  return renderRestoreDocument(blocks);
}
