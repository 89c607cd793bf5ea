import { parseEnablementSelectors, type EnablementSelector, type LocalPolicy } from '@istio-cni/capture';
import { CniError, ErrorCode, goConfigFileText, type JsonObject, type JsonValue, type NetConf } from '@istio-cni/cni';
import { DEFAULT_RUN_DIR } from './paths.ts';

export const PLUGIN_TYPE = 'istio-cni';

/**
 * The istio-cni entry of the conflist (upstream `cni/pkg/plugin/plugin.go` `Config`): written by the installer, read by the plugin
 * on every invocation.
 */
export interface PluginConfig {
  pluginLogLevel: string;
  cniAgentRunDir: string;
  ambientEnabled: boolean;
  enablementSelectors: EnablementSelector[];
  excludeNamespaces: string[];
  podNamespace: string;
  nativeNftables: boolean;
  enableAmbientDetectionRetry: boolean;
  /**
   * FORCE_IPTABLES_BINARY of the daemon, `''` when unset. Beyond upstream: written only when set,
   * so the plugin's degraded mode picks the same iptables binaries as the agent (the plugin gets
   * the runtime's environment, not the daemon's).
   */
  forceIptablesBinary: string;
}

/** The entry as the installer writes it: upstream's keys in upstream's fixed order. */
export function buildPluginConfig(config: PluginConfig): JsonObject {
  return {
    cniVersion: '0.3.1',
    name: PLUGIN_TYPE,
    type: PLUGIN_TYPE,
    ipam: {},
    dns: {},
    plugin_log_level: config.pluginLogLevel,
    cni_agent_run_dir: config.cniAgentRunDir,
    ambient_enabled: config.ambientEnabled,
    enablement_selectors: config.enablementSelectors as unknown as JsonValue,
    exclude_namespaces: config.excludeNamespaces.length > 0 ? config.excludeNamespaces : null,
    pod_namespace: config.podNamespace,
    native_nftables: config.nativeNftables,
    enable_ambient_detection_retry: config.enableAmbientDetectionRetry,
    ...(config.forceIptablesBinary ? { force_iptables_binary: config.forceIptablesBinary } : {}),
  };
}

/** The standalone file text: fixed key order, 2-space indent, final newline. */
export function pluginConfigText(config: PluginConfig): string {
  return goConfigFileText(buildPluginConfig(config), 'ordered');
}

function invalid(key: string, expected: string, value: unknown): CniError {
  return new CniError(ErrorCode.InvalidNetworkConfig, `invalid istio-cni config: ${key} must be ${expected}, got ${JSON.stringify(value)}`);
}

function stringKey(raw: Record<string, unknown>, key: string, fallback: string): string {
  const v = raw[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'string') throw invalid(key, 'a string', v);
  return v;
}

function boolKey(raw: Record<string, unknown>, key: string): boolean {
  const v = raw[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw invalid(key, 'a boolean', v);
  return v;
}

function selectorsKey(raw: Record<string, unknown>): EnablementSelector[] {
  try {
    return parseEnablementSelectors(raw.enablement_selectors);
  } catch (err) {
    throw new CniError(ErrorCode.InvalidNetworkConfig, `invalid istio-cni config: enablement_selectors: ${(err as Error).message}`);
  }
}

function namespacesKey(raw: Record<string, unknown>): string[] {
  const v = raw.exclude_namespaces;
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((n) => typeof n === 'string')) {
    throw invalid('exclude_namespaces', 'an array of strings', v);
  }
  return v as string[];
}

/** The entry as the plugin reads it from its netconf; a key of the wrong type is CNI error 7. */
export function parsePluginConfig(conf: NetConf): PluginConfig {
  const raw = conf.raw;
  return {
    pluginLogLevel: stringKey(raw, 'plugin_log_level', ''),
    cniAgentRunDir: stringKey(raw, 'cni_agent_run_dir', '') || DEFAULT_RUN_DIR,
    ambientEnabled: boolKey(raw, 'ambient_enabled'),
    enablementSelectors: selectorsKey(raw),
    excludeNamespaces: namespacesKey(raw),
    podNamespace: stringKey(raw, 'pod_namespace', ''),
    nativeNftables: boolKey(raw, 'native_nftables'),
    enableAmbientDetectionRetry: boolKey(raw, 'enable_ambient_detection_retry'),
    forceIptablesBinary: stringKey(raw, 'force_iptables_binary', ''),
  };
}

/** The pass-through policy the entry sets: the agent's namespace and the excluded namespaces. */
export function localPolicyOf(config: PluginConfig): LocalPolicy {
  return { agentNamespace: config.podNamespace, excludeNamespaces: config.excludeNamespaces };
}
