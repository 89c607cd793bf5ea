import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

export const TESTDATA_ROOT = '/work/shared/upstream-testdata';

/** A small line diff: the first differing line with context, enough to see what broke. */
export function lineDiff(expected: string, actual: string): string {
  const e = expected.split('\n');
  const a = actual.split('\n');
  const out: string[] = [];
  const max = Math.max(e.length, a.length);
  for (let i = 0; i < max; i++) {
    if (e[i] === a[i]) {
      out.push(`  ${e[i] ?? ''}`);
      continue;
    }
    if (e[i] !== undefined) out.push(`- ${e[i]}`);
    if (a[i] !== undefined) out.push(`+ ${a[i]}`);
  }
  return out.join('\n');
}

/**
 * Upstream's trimmed compare (CASES.md 0): both sides trimmed of leading/trailing whitespace, the
 * rest must match byte for byte. These goldens are upstream's reference data, so there is no
 * REFRESH_GOLDEN switch: a mismatch is always our bug.
 */
export function assertTrimmedGolden(path: string, actual: string): void {
  const expected = readFileSync(path, 'utf8').trim();
  const got = actual.trim();
  if (expected !== got) assert.fail(`golden mismatch for ${path}:\n${lineDiff(expected, got)}`);
}
