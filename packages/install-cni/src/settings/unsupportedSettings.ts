import { SettingsError, parseBool } from './parseValues.ts';
import type { SettingSpec } from './settingSpecs.ts';

/**
 * Settings in `--help` for upstream compatibility that this agent does not act on. Left at their
 * default they are accepted; any other value stops the daemon at start, naming the setting and
 * why, rather than being silently ignored (docs/upstream-compat.md, "Refused settings").
 */
export const UNSUPPORTED_SETTINGS: Readonly<Record<string, string>> = {
  CNI_NETWORK_CONFIG:
    'the plugin config is written from the other settings, never from a template (upstream registers it and reads it nowhere)',
  CNI_NETWORK_CONFIG_FILE:
    'the plugin config is written from the other settings, never from a template (upstream registers it and reads it nowhere)',
  LOG_LEVEL: "the plugin's log level is --log_output_level's cni-plugin scope (upstream registers LOG_LEVEL and reads it nowhere)",
  REVISION: "upstream stores it and acts on it nowhere; the chart's revision value labels the objects instead",
  AMBIENT_USE_SCOPED_XTABLES_LOCKING:
    "legacy iptables in a pod's network namespace always lock on that namespace's file (XTABLES_LOCKFILE), never on the host-wide /run/xtables.lock",
};

function isDefault(spec: SettingSpec, value: string): boolean {
  if (spec.kind !== 'bool') return value === spec.default;
  return parseBool(spec.env, value) === parseBool(spec.env, spec.default);
}

/** A message for each unsupported setting given a value other than its default. */
export function unsupportedSettingErrors(specs: readonly SettingSpec[], raw: (spec: SettingSpec) => string): string[] {
  const errors: string[] = [];
  for (const spec of specs) {
    const why = UNSUPPORTED_SETTINGS[spec.env];
    if (why === undefined) continue;
    const value = raw(spec);
    try {
      if (isDefault(spec, value)) continue;
    } catch (err) {
      if (!(err instanceof SettingsError)) throw err;
      errors.push(err.message);
      continue;
    }
    errors.push(`${spec.env}=${JSON.stringify(value)} is not supported: ${why}`);
  }
  return errors;
}

/** `--log_as_json`: logs are always JSON, so only true (or the flag alone) is accepted. */
export function logAsJsonErrors(flag: unknown): string[] {
  if (flag === undefined || flag === true) return [];
  const value = String(flag);
  try {
    if (parseBool('log_as_json', value)) return [];
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    return [err.message];
  }
  return [`log_as_json=${JSON.stringify(value)} is not supported: logs are always JSON`];
}
