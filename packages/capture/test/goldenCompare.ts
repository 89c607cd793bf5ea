import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { UPSTREAM_TESTDATA } from '../../../test/support/upstreamTestdata.ts';

export const TESTDATA_ROOT = UPSTREAM_TESTDATA;

/** Line diff (longest common subsequence): `-` golden only, `+` produced only, `  ` both. */
export function lineDiff(expected: string, actual: string): string {
  const e = expected.split('\n');
  const a = actual.split('\n');
  // lcs[i][j] = LCS length of e[i..] and a[j..]; goldens are small, so O(n*m) is fine.
  const lcs = Array.from({ length: e.length + 1 }, () => new Array<number>(a.length + 1).fill(0));
  for (let i = e.length - 1; i >= 0; i--) {
    for (let j = a.length - 1; j >= 0; j--) {
      const row = lcs[i] as number[];
      row[j] = e[i] === a[j] ? (lcs[i + 1]?.[j + 1] ?? 0) + 1 : Math.max(lcs[i + 1]?.[j] ?? 0, row[j + 1] ?? 0);
    }
  }
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < e.length || j < a.length) {
    if (i < e.length && j < a.length && e[i] === a[j]) {
      out.push(`  ${e[i]}`);
      i++;
      j++;
    } else if (j < a.length && (i >= e.length || (lcs[i]?.[j + 1] ?? 0) >= (lcs[i + 1]?.[j] ?? 0))) {
      out.push(`+ ${a[j]}`);
      j++;
    } else {
      out.push(`- ${e[i]}`);
      i++;
    }
  }
  return out.join('\n');
}

/**
 * Upstream's trimmed compare (testdata/upstream/inputs.md §0): both sides trimmed of leading/trailing whitespace, the
 * rest must match byte for byte. These goldens are upstream's reference data, so there is no
 * REFRESH_GOLDEN switch: a mismatch is always our bug.
 */
export function assertTrimmedGolden(path: string, actual: string): void {
  const expected = readFileSync(path, 'utf8').trim();
  const got = actual.trim();
  if (expected !== got) assert.fail(`golden mismatch for ${path}:\n${lineDiff(expected, got)}`);
}
