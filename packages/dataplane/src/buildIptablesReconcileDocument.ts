import { type IptablesState, isIstioChain, ownedRules } from './iptablesState.ts';
import { parseRestoreDocument, renderRestoreDocument, type RestoreTableBlock } from './restoreDocument.ts';

/**
 * One restore document that turns `actual` into the plan: per table, delete the owned rules from
 * other chains, flush every ISTIO_* chain, delete the ISTIO_* chains the plan does not have, then
 * the planned lines (without `-N` for chains that already exist). Each table block is committed
 * atomically by iptables-restore, so no packet sees a half-removed state and the guardrail DROP
 * rules upstream installs around its multi-command reconcile are not needed.
 */
export function buildIptablesReconcileDocument(plannedDocument: string, expected: IptablesState, actual: IptablesState): string {
  const planned = parseRestoreDocument(plannedDocument);
  const tables = new Set([...planned.map((b) => b.table), ...actual.keys()]);
  const blocks: RestoreTableBlock[] = [];
  for (const table of tables) {
    const have = actual.get(table) ?? new Map<string, string[]>();
    const want = expected.get(table) ?? new Map<string, string[]>();
    const plannedLines = planned.filter((b) => b.table === table).flatMap((b) => b.lines);
    const plannedChains = new Set(plannedLines.filter((l) => l.startsWith('-N ')).map((l) => l.slice(3).trim()));
    const lines: string[] = [];
    for (const [chain, rules] of have) {
      if (isIstioChain(chain)) continue;
      for (const rule of ownedRules(chain, rules, new Set(want.get(chain) ?? []))) lines.push(`-D ${chain} ${rule}`);
    }
    const istioChains = [...have.keys()].filter(isIstioChain);
    for (const chain of istioChains) lines.push(`-F ${chain}`);
    for (const chain of istioChains) if (!plannedChains.has(chain)) lines.push(`-X ${chain}`);
    for (const line of plannedLines) {
      if (line.startsWith('-N ') && have.has(line.slice(3).trim())) continue;
      lines.push(line);
    }
    if (lines.length > 0) blocks.push({ table, lines });
  }
  return renderRestoreDocument(blocks);
}
