import { CniError, ErrorCode, type NetConf } from '@istio-cni/cni';
import { DEFAULT_RUN_DIR } from '@istio-cni/handoff';
import { parseEnablementSelectors, type EnablementSelector } from '@istio-cni/capture';

/** The istio-cni keys of the netconf (upstream `cni/pkg/plugin/plugin.go` `Config`). */
export interface PluginConfig {
  pluginLogLevel: string;
  cniAgentRunDir: string;
  ambientEnabled: boolean;
  enablementSelectors: EnablementSelector[];
  excludeNamespaces: string[];
  podNamespace: string;
  nativeNftables: boolean;
  enableAmbientDetectionRetry: boolean;
  /** `force_iptables_binary` (written by our installer when the daemon has FORCE_IPTABLES_BINARY). */
  forceIptablesBinary: string;
}

function invalid(key: string, expected: string, value: unknown): CniError {
  return new CniError(
    ErrorCode.InvalidNetworkConfig,
    `invalid istio-cni config: ${key} must be ${expected}, got ${JSON.stringify(value)}`,
  );
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
