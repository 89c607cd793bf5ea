import YAML from 'yaml';
import { parseLogThreshold, type LogThreshold } from '@istio-cni/handoff';

/** A bad value: the message names the setting and the value. */
export class SettingsError extends Error {
  override name = 'SettingsError';
}

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** Boolean spellings accepted by upstream (Go's strconv.ParseBool). */
export function parseBool(setting: string, value: string): boolean {
  if (TRUE.has(value)) return true;
  if (FALSE.has(value)) return false;
  throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want true or false`);
}

export function parseInteger(setting: string, value: string): number {
  const v = value.trim();
  if (!/^[+-]?\d+$/.test(v)) throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want an integer`);
  return Number.parseInt(v, 10);
}

export function parsePort(setting: string, value: string): number {
  const n = parseInteger(setting, value);
  if (n < 0 || n > 65535) throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want a port 0-65535`);
  return n;
}

/** A file mode: decimal (`384`), or octal with a leading `0`/`0o` (`0600`), as viper's cast does. */
export function parseFileMode(setting: string, value: string): number {
  const v = value.trim();
  let n: number;
  if (/^0[oO]?[0-7]+$/.test(v)) n = Number.parseInt(v.replace(/^0[oO]?/, ''), 8);
  else if (/^[1-9]\d*$/.test(v)) n = Number.parseInt(v, 10);
  else throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want a file mode such as 0600 or 384`);
  if (n > 0o777) throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: mode above 0777`);
  return n;
}

/** Comma-separated list; entries trimmed, empty ones dropped. */
export function parseList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

export type LabelSelectorJson = {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
};

export interface EnablementSelector {
  podSelector?: LabelSelectorJson;
  namespaceSelector?: LabelSelectorJson;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function labelSelector(where: string, v: unknown): LabelSelectorJson | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${where} must be a label selector`);
  const out: LabelSelectorJson = {};
  const labels = v.matchLabels;
  if (labels !== undefined && labels !== null) {
    if (!isObject(labels)) throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${where}.matchLabels must be a map`);
    const m: Record<string, string> = {};
    for (const [k, val] of Object.entries(labels)) m[k] = String(val);
    if (Object.keys(m).length > 0) out.matchLabels = m;
  }
  const exprs = v.matchExpressions;
  if (exprs !== undefined && exprs !== null) {
    if (!Array.isArray(exprs)) throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${where}.matchExpressions must be a list`);
    const list = exprs.map((e, i) => {
      if (!isObject(e) || typeof e.key !== 'string' || typeof e.operator !== 'string') {
        throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${where}.matchExpressions[${i}] needs key and operator`);
      }
      const req: { key: string; operator: string; values?: string[] } = { key: e.key, operator: e.operator };
      if (Array.isArray(e.values) && e.values.length > 0) req.values = e.values.map(String);
      return req;
    });
    if (list.length > 0) out.matchExpressions = list;
  }
  return out;
}

/** The YAML selector list of `AMBIENT_ENABLEMENT_SELECTOR`, in the key order Go marshals it. */
export function parseEnablementSelectors(value: string): EnablementSelector[] {
  if (value.trim() === '') return [];
  let doc: unknown;
  try {
    doc = YAML.parse(value);
  } catch (err) {
    throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (doc === null || doc === undefined) return [];
  if (!Array.isArray(doc)) throw new SettingsError('invalid AMBIENT_ENABLEMENT_SELECTOR: want a YAML list of selectors');
  return doc.map((entry, i) => {
    if (!isObject(entry)) throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: entry ${i} is not a map`);
    const out: EnablementSelector = {};
    const pod = labelSelector(`[${i}].podSelector`, entry.podSelector);
    const ns = labelSelector(`[${i}].namespaceSelector`, entry.namespaceSelector);
    if (pod) out.podSelector = pod;
    if (ns) out.namespaceSelector = ns;
    return out;
  });
}

export interface LogLevels {
  agent: LogThreshold;
  plugin: LogThreshold;
}

/** `--log_output_level`: `level` or `scope:level,scope:level` (istio log flags). Default info. */
export function parseLogOutputLevel(value: string | undefined): LogLevels {
  const levels: LogLevels = { agent: 'info', plugin: 'info' };
  if (value === undefined || value.trim() === '') return levels;
  for (const part of value.split(',')) {
    const [scopeOrLevel, maybeLevel] = part.trim().split(':', 2) as [string, string | undefined];
    const levelText = maybeLevel ?? scopeOrLevel;
    const level = parseLogThreshold(levelText, 'invalid' as LogThreshold);
    if ((level as string) === 'invalid') {
      throw new SettingsError(`invalid log_output_level ${JSON.stringify(part)}: unknown level ${JSON.stringify(levelText)}`);
    }
    if (maybeLevel === undefined || scopeOrLevel === 'all' || scopeOrLevel === 'default') {
      levels.agent = level;
      levels.plugin = level;
    } else if (scopeOrLevel === 'cni-agent') levels.agent = level;
    else if (scopeOrLevel === 'cni-plugin') levels.plugin = level;
  }
  return levels;
}
