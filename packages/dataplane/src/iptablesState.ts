/** Rules of one table, by chain; each rule is its `iptables-save` text after `-A <chain> `. */
export type IptablesChainRules = Map<string, string[]>;
/** Tables by name (`nat`, `mangle`, ...). */
export type IptablesState = Map<string, IptablesChainRules>;

const builtinChains = new Set(['PREROUTING', 'INPUT', 'FORWARD', 'OUTPUT', 'POSTROUTING']);
const tables = new Set(['raw', 'mangle', 'nat', 'filter', 'security']);

/**
 * A table or chain name read back that may go into a restore document: a known table; a chain name
 * of the characters iptables' own chains and ours use (a name read back is the tenant's to choose).
 */
export function isPlainTableName(name: string): boolean {
  return tables.has(name);
}
export function isPlainChainName(name: string): boolean {
  return /^[A-Za-z0-9_.-]{1,28}$/.test(name);
}

/** Chains this agent owns: the ISTIO_* family (upstream `tools/istio-iptables` constants); everything else belongs to someone else. */
export function isIstioChain(chain: string): boolean {
  return chain.startsWith('ISTIO');
}

export function isBuiltinChain(chain: string): boolean {
  return builtinChains.has(chain);
}

/**
 * Splits rule words at spaces, honouring the double quotes iptables-save puts around an argument
 * (a comment): a quote opens only at the start of a word, `\"` inside is an escaped quote. Returns
 * the words and whether a quote is still open at the end. A quote elsewhere (a tenant's chain
 * `we"ird`) is an ordinary character.
 */
function splitWords(text: string, words?: string[]): { words: string[]; open: boolean } {
  // Words are slices of `text` (a flooded netns prints 100k rules: no per-character copies), taken
  // only when `words` is given.
  let start = -1;
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
    } else if (c === ' ' || c === '\t') {
      if (start >= 0) words?.push(text.slice(start, i));
      start = -1;
    } else if (start < 0) {
      start = i;
      quoted = c === '"';
    }
  }
  if (start >= 0) words?.push(text.slice(start, text.length));
  return { words: words ?? [], open: quoted };
}

/** A rule's words as iptables reads them (see {@link splitWords}). */
export function ruleTokens(rule: string): string[] {
  return splitWords(rule, []).words;
}

/**
 * A rule's text with its words joined by single spaces: the text itself when it has no run of
 * blanks to collapse (what iptables-save prints), so a large read-back is not copied rule by rule.
 */
function normalizedRule(rule: string): string {
  if (!/\t| {2}|^ | $/.test(rule)) return rule;
  return ruleTokens(rule).join(' ');
}

/**
 * `iptables-save` output as logical lines. A netns's tenant can put a newline into a rule's comment,
 * which iptables-save prints raw inside the quotes: an `-A` line whose quoted argument is still open
 * continues on the next line (kept as the two characters `\n`), so a comment can never start a line
 * of its own (a forged rule). The chain name (the word after `-A`) never opens a quote.
 */
function saveLines(text: string): string[] {
  const lines: string[] = [];
  let pending: string | undefined;
  for (const physical of text.split('\n')) {
    const line = pending === undefined ? physical : `${pending}\\n${physical}`;
    const rest = line.includes('"') ? /^\s*-A\s+\S+\s(.*)$/s.exec(line)?.[1] : undefined;
    if (rest !== undefined && splitWords(rest).open) {
      pending = line;
      continue;
    }
    pending = undefined;
    lines.push(line);
  }
  if (pending !== undefined) lines.push(pending);
  return lines;
}

/** Parses `iptables-save` output. Comments and counters are dropped; chain declarations are kept. */
export function parseIptablesSave(text: string): IptablesState {
  const state: IptablesState = new Map();
  let table: IptablesChainRules | undefined;
  for (const raw of saveLines(text)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (line.startsWith('*')) {
      const name = line.slice(1).trim();
      table = state.get(name) ?? new Map();
      state.set(name, table);
    } else if (line === 'COMMIT') {
      table = undefined;
    } else if (table !== undefined && line.startsWith(':')) {
      const chain = line.slice(1).split(/\s+/)[0] ?? '';
      if (!table.has(chain)) table.set(chain, []);
    } else if (table !== undefined && line.startsWith('-A ')) {
      const m = /^-A\s+(\S+)\s*(.*)$/s.exec(line);
      const chain = m?.[1] ?? '';
      const rules = table.get(chain) ?? [];
      rules.push(normalizedRule(m?.[2] ?? ''));
      table.set(chain, rules);
    }
  }
  return state;
}

/** The chain a rule jumps or goes to (`-j X` / `-g X`), if any. */
export function jumpTarget(rule: string): string | undefined {
  const tokens = ruleTokens(rule);
  const i = tokens.findIndex((t) => t === '-j' || t === '-g' || t === '--jump' || t === '--goto');
  return i < 0 ? undefined : tokens[i + 1];
}

/**
 * The rules in a chain that this agent owns: every rule of an ISTIO_* chain; in other chains the
 * rules that jump into ISTIO_* or that the plan itself puts there (e.g. mangle OUTPUT CONNMARK).
 */
export function ownedRules(chain: string, rules: readonly string[], plannedInChain: ReadonlySet<string>): string[] {
  if (isIstioChain(chain)) return [...rules];
  return rules.filter((r) => plannedInChain.has(r) || isIstioChain(jumpTarget(r) ?? ''));
}

export interface IptablesStateDiff {
  /** Any ISTIO_* chain, jump into one, or planned rule is present. */
  residue: boolean;
  /** Empty when the owned state equals the expected state exactly. */
  differences: string[];
}

/**
 * Compares what the namespace holds (`actual`) with the kernel-canonical form of the plan
 * (`expected`), looking only at what this agent owns, so foreign rules never cause a difference.
 */
export function diffIptablesState(expected: IptablesState, actual: IptablesState): IptablesStateDiff {
  const differences: string[] = [];
  let residue = false;
  const tables = new Set([...expected.keys(), ...actual.keys()]);
  for (const tableName of [...tables].sort()) {
    const want = expected.get(tableName) ?? new Map<string, string[]>();
    const have = actual.get(tableName) ?? new Map<string, string[]>();
    const chains = new Set([...want.keys(), ...have.keys()]);
    for (const chain of chains) {
      const wantRules = want.get(chain);
      const planned = new Set(wantRules ?? []);
      const haveRules = have.get(chain);
      const ownedWant = wantRules === undefined ? [] : ownedRules(chain, wantRules, planned);
      const ownedHave = haveRules === undefined ? [] : ownedRules(chain, haveRules, planned);
      if (ownedHave.length > 0 || (haveRules !== undefined && isIstioChain(chain))) residue = true;
      if (isIstioChain(chain)) {
        if (haveRules === undefined) {
          differences.push(`${tableName}: missing chain ${chain}`);
          continue;
        }
        if (wantRules === undefined) {
          differences.push(`${tableName}: unexpected chain ${chain}`);
          continue;
        }
      }
      const diff = firstDifference(ownedWant, ownedHave);
      if (diff !== undefined) differences.push(`${tableName} ${chain}: ${diff}`);
    }
  }
  return { residue, differences };
}

function firstDifference(want: readonly string[], have: readonly string[]): string | undefined {
  const n = Math.max(want.length, have.length);
  for (let i = 0; i < n; i++) {
    const w = want[i];
    const h = have[i];
    if (w === h) continue;
    if (h === undefined) return `missing rule ${i + 1} ${JSON.stringify(w)}`;
    if (w === undefined) return `unexpected rule ${i + 1} ${JSON.stringify(h)}`;
    return `rule ${i + 1} is ${JSON.stringify(h)}, expected ${JSON.stringify(w)}`;
  }
  return undefined;
}
