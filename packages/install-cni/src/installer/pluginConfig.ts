import type { EnablementSelector } from '../settings/parseValues.ts';
import { marshalOrdered, type JsonObject, type JsonValue } from './cniJson.ts';

export const PLUGIN_TYPE = 'istio-cni';

/** What the istio-cni entry carries (upstream `cni/pkg/install/cniconfig.go`; testdata/upstream/inputs.md §5.1). */
export interface PluginConfigInput {
  pluginLogLevel: string;
  cniAgentRunDir: string;
  ambientEnabled: boolean;
  enablementSelectors: EnablementSelector[];
  excludeNamespaces: string[];
  podNamespace: string;
  nativeNftables: boolean;
  enableAmbientDetectionRetry: boolean;
  /**
   * FORCE_IPTABLES_BINARY of the daemon. Beyond upstream: written only when set, so the plugin's
   * degraded mode picks the same iptables binaries as the agent (the plugin gets the runtime's
   * environment, not the daemon's).
   */
  forceIptablesBinary?: string;
}

/** The plugin's own config object, keys in upstream's fixed order. */
export function buildPluginConfig(input: PluginConfigInput): JsonObject {
  return {
    cniVersion: '0.3.1',
    name: PLUGIN_TYPE,
    type: PLUGIN_TYPE,
    ipam: {},
    dns: {},
    plugin_log_level: input.pluginLogLevel,
    cni_agent_run_dir: input.cniAgentRunDir,
    ambient_enabled: input.ambientEnabled,
    enablement_selectors: input.enablementSelectors as unknown as JsonValue,
    exclude_namespaces: input.excludeNamespaces.length > 0 ? input.excludeNamespaces : null,
    pod_namespace: input.podNamespace,
    native_nftables: input.nativeNftables,
    enable_ambient_detection_retry: input.enableAmbientDetectionRetry,
    ...(input.forceIptablesBinary ? { force_iptables_binary: input.forceIptablesBinary } : {}),
  };
}

/** The standalone file text: fixed key order, 2-space indent, final newline. */
export function pluginConfigText(input: PluginConfigInput): string {
  return marshalOrdered(buildPluginConfig(input));
}
