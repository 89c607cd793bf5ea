import { isIP } from 'node:net';
import { parseEnablementSelectors as validateEnablementSelectors, type EnablementSelector, type LabelSelector } from '@istio-cni/capture';
import YAML from 'yaml';
import { parseLogThreshold, type LogThreshold } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';

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

/** An address to listen on: an IPv4 or IPv6 literal, or empty for every address (never a host name to resolve). */
export function parseListenAddress(setting: string, value: string): string {
  const v = value.trim();
  if (v !== '' && isIP(v) === 0)
    throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want an IP address, or empty for every address`);
  return v;
}

/** A file mode: decimal (`384`), or octal with a leading `0`/`0o` (`0600`), as viper's cast does. */
export function parseFileMode(setting: string, value: string): number {
  const v = value.trim();
  let n: number;
  if (/^0[oO]?[0-7]+$/.test(v)) n = Number.parseInt(v.replace(/^0[oO]?/, ''), 8);
  else if (/^[1-9]\d*$/.test(v)) n = Number.parseInt(v, 10);
  else
    throw new SettingsError(
      `invalid ${setting} ${JSON.stringify(value)}: want an octal file mode such as 0600 (or its decimal value, 384)`,
    );
  if (n > 0o777) throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: mode above 0777`);
  return n;
}

const durationUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A Go duration (`60s`, `1m30s`, `500ms`, `0`) in milliseconds; negative values are refused. */
export function parseDurationMs(setting: string, value: string): number {
  const v = value.trim();
  if (v === '0') return 0;
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = part.exec(v); m !== null; m = part.exec(v)) {
    total += Number(m[1]) * (durationUnits[m[2] as string] ?? 0);
    end = part.lastIndex;
  }
  if (v === '' || end !== v.length)
    throw new SettingsError(`invalid ${setting} ${JSON.stringify(value)}: want a duration such as 60s or 1m30s`);
  return Math.round(total);
}

/** Comma-separated list; entries trimmed, empty ones dropped. */
export function parseList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Drops empty parts, so the conflist carries what Go's omitempty marshalling would. */
function compactSelector(selector: LabelSelector | undefined): LabelSelector | undefined {
  if (selector === undefined) return undefined;
  const out: LabelSelector = {};
  if (selector.matchLabels && Object.keys(selector.matchLabels).length > 0) out.matchLabels = selector.matchLabels;
  if (selector.matchExpressions && selector.matchExpressions.length > 0) {
    out.matchExpressions = selector.matchExpressions.map((e) => ({
      key: e.key,
      operator: e.operator,
      ...(e.values && e.values.length > 0 ? { values: e.values } : {}),
    }));
  }
  return out;
}

function stringifyLabelValues(entry: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...entry };
  for (const key of ['podSelector', 'namespaceSelector']) {
    const sel = entry[key];
    if (isObject(sel) && isObject(sel.matchLabels)) {
      out[key] = { ...sel, matchLabels: Object.fromEntries(Object.entries(sel.matchLabels).map(([k, v]) => [k, String(v)])) };
    }
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
    throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${errorMessage(err)}`);
  }
  if (doc === null || doc === undefined) return [];
  if (!Array.isArray(doc)) throw new SettingsError('invalid AMBIENT_ENABLEMENT_SELECTOR: want a YAML list of selectors');
  // Label values written unquoted in YAML may decode as numbers or booleans; labels are strings.
  const stringified = doc.map((entry) => (isObject(entry) ? stringifyLabelValues(entry) : entry));
  let selectors: EnablementSelector[];
  try {
    selectors = validateEnablementSelectors(stringified);
  } catch (err) {
    throw new SettingsError(`invalid AMBIENT_ENABLEMENT_SELECTOR: ${(err as Error).message}`);
  }
  // Both keys on every entry, `{}` for an absent one: upstream's `EnablementSelector` has no
  // `omitempty` (cni/pkg/util/enablement_selector.go), so the conflist's `enablement_selectors`
  // read the same whichever agent wrote them (`{}` matches everything for either).
  return selectors.map((entry) => ({
    podSelector: compactSelector(entry.podSelector) ?? {},
    namespaceSelector: compactSelector(entry.namespaceSelector) ?? {},
  }));
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

export type { EnablementSelector };
