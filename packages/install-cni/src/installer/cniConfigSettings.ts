import { isOwnedMode, type Settings } from '../settings/settings.ts';
import type { PluginConfig } from '@istio-cni/handoff';

/** What the config half of the installer needs from the settings. */
export interface CniConfigSettings {
  mountedCniNetDir: string;
  /** The primary config named by the user; empty = auto-detect. */
  cniConfName: string;
  chainedCniPlugin: boolean;
  /** Effective owned mode (owned flag ∧ chained ∧ ambient). */
  owned: boolean;
  ownedFilename: string;
  cniConfGroupRead: boolean;
  plugin: PluginConfig;
}

export const STANDALONE_DEFAULT_NAME = 'YYY-istio-cni.conf';

export function cniConfigSettings(s: Settings): CniConfigSettings {
  return {
    mountedCniNetDir: s.mountedCniNetDir,
    cniConfName: s.cniConfName,
    chainedCniPlugin: s.chainedCniPlugin,
    owned: isOwnedMode(s),
    ownedFilename: s.istioOwnedCniConfigFilename,
    cniConfGroupRead: s.cniConfGroupRead,
    plugin: {
      pluginLogLevel: s.logLevels.plugin,
      cniAgentRunDir: s.cniAgentRunDir,
      ambientEnabled: s.ambientEnabled,
      enablementSelectors: s.enablementSelectors,
      excludeNamespaces: s.excludeNamespaces,
      podNamespace: s.podNamespace,
      nativeNftables: s.nativeNftables,
      enableAmbientDetectionRetry: s.enableAmbientDetectionRetry,
      forceIptablesBinary: s.forceIptablesBinary,
    },
  };
}

/** Mode of files Istio creates: 0600, or 0640 with group-read. */
export function createdFileMode(c: Pick<CniConfigSettings, 'cniConfGroupRead'>): number {
  return c.cniConfGroupRead ? 0o640 : 0o600;
}
