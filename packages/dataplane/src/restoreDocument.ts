/** One `* <table>` … `COMMIT` block of an iptables-restore document, without header and COMMIT. */
export interface RestoreTableBlock {
  table: string;
  lines: string[];
}

/** Splits a restore document (`iptables-restore` format) into per-table blocks, in document order. */
export function parseRestoreDocument(document: string): RestoreTableBlock[] {
  const blocks: RestoreTableBlock[] = [];
  let current: RestoreTableBlock | undefined;
  for (const raw of document.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      current = { table: line.slice(1).trim(), lines: [] };
      blocks.push(current);
    } else if (line === 'COMMIT') {
      current = undefined;
    } else if (current === undefined) {
      throw new Error(`restore document line ${JSON.stringify(line)} is outside a table block`);
    } else {
      current.lines.push(line);
    }
  }
  return blocks;
}

export function renderRestoreDocument(blocks: readonly RestoreTableBlock[]): string {
  return blocks.map((b) => [`* ${b.table}`, ...b.lines, 'COMMIT'].join('\n')).join('\n') + '\n';
}
