import { hostname } from 'node:os';
import { Option, type Command } from 'commander';
import { SETTING_SPECS, attributeName, flagName, type SettingSpec } from './settingSpecs.ts';
import {
  SettingsError,
  parseBool,
  parseDurationMs,
  parseEnablementSelectors,
  parseFileMode,
  parseInteger,
  parseList,
  parseLogOutputLevel,
  parseListenAddress,
  parsePort,
  type EnablementSelector,
  type LogLevels,
} from './parseValues.ts';
import { logAsJsonErrors, unsupportedSettingErrors } from './unsupportedSettings.ts';

export interface RepairSettings {
  enabled: boolean;
  repairPods: boolean;
  deletePods: boolean;
  labelPods: boolean;
  brokenPodLabelKey: string;
  brokenPodLabelValue: string;
  nodeName: string;
  sidecarAnnotation: string;
  initContainerName: string;
  initContainerTerminationMessage: string;
  initContainerExitCode: number;
  labelSelectors: string;
  fieldSelectors: string;
}

/** The node readiness taint (not upstream): lifted once the daemon is ready, never added. */
export interface NodeTaintSettings {
  enabled: boolean;
  key: string;
}

/** The daemon's whole configuration, read once at start-up and passed down. */
export interface Settings {
  cniBinSourceDir: string;
  cniBinTargetDirs: string[];
  mountedCniNetDir: string;
  cniAgentRunDir: string;
  serviceAccountDir: string;
  hostProcDir: string;
  /** Absolute, or '' (the netns directory is not searched). */
  hostNetnsDir: string;
  readinessPort: number;
  /** IP literal the health server listens on; '' = every address. */
  readinessAddress: string;
  /** `<= 0` disables the metrics server. */
  monitoringPort: number;
  /** IP literal the metrics server listens on; '' = every address. */
  monitoringAddress: string;
  cniConfName: string;
  chainedCniPlugin: boolean;
  istioOwnedCniConfig: boolean;
  /** Already defaulted to `02-istio-cni.conflist` when empty. */
  istioOwnedCniConfigFilename: string;
  kubeconfigMode: number;
  cniConfGroupRead: boolean;
  /** Already defaulted to `<sa>/ca.crt` when empty. */
  kubeCaFile: string;
  skipTlsVerify: boolean;
  ztunnelUdsAddress: string;
  ambientEnabled: boolean;
  enableAmbientDetectionRetry: boolean;
  repair: RepairSettings;
  nodeTaint: NodeTaintSettings;
  /** VERIFY_INTERVAL in milliseconds; 0 = no periodic verification. */
  verifyIntervalMs: number;
  verifyReportOnly: boolean;
  /** HEAP_TRIM_INTERVAL in milliseconds; 0 = V8's memory reducer alone. */
  heapTrimIntervalMs: number;
  excludeNamespaces: string[];
  podNamespace: string;
  ambientEnablementSelector: string;
  enablementSelectors: EnablementSelector[];
  ambientDnsCapture: boolean;
  ambientIpv6: boolean;
  ambientDisableSafeUpgrade: boolean;
  ambientReconcilePodRulesOnStartup: boolean;
  nativeNftables: boolean;
  k8sServiceProtocol: string;
  k8sServiceHost: string;
  k8sServicePort: string;
  k8sNodeName: string;
  forceIptablesBinary: string;
  allowSwitchToHostNs: boolean;
  nodeName: string;
  systemNamespace: string;
  hostProbeSnatIp: string;
  hostProbeSnatIpv6: string;
  ambientEnableAwsBranchEniProbe: boolean;
  logLevels: LogLevels;
}

export const DEFAULT_OWNED_CONFIG_FILENAME = '02-istio-cni.conflist';

/** Owned mode takes effect only for a chained plugin with ambient on (as upstream). */
export function isOwnedMode(s: Pick<Settings, 'istioOwnedCniConfig' | 'chainedCniPlugin' | 'ambientEnabled'>): boolean {
  return s.istioOwnedCniConfig && s.chainedCniPlugin && s.ambientEnabled;
}

/** Registers every flag-backed setting (plus istio's log flags) on `command`. */
export function registerSettingsOptions(command: Command): Command {
  for (const s of SETTING_SPECS) {
    if (!s.flag) continue;
    const name = flagName(s.env);
    const help = `${s.help} (env ${s.env}, default ${JSON.stringify(s.default)})`;
    command.addOption(s.kind === 'bool' ? new Option(`--${name} [bool]`, help) : new Option(`--${name} <value>`, help));
  }
  command.addOption(new Option('--log_output_level <levels>', 'log levels, e.g. cni-agent:debug,cni-plugin:info'));
  command.addOption(new Option('--log_as_json [bool]', 'logs are always JSON; false stops the daemon at start'));
  return command;
}

export type ParsedOptions = Record<string, unknown>;
export type Env = Record<string, string | undefined>;

export interface ResolveOptions {
  hostname?: () => string;
}

function rawValue(spec: SettingSpec, opts: ParsedOptions, env: Env): string {
  if (spec.flag) {
    const v = opts[attributeName(flagName(spec.env))];
    if (v === true) return 'true';
    if (typeof v === 'string') return v;
  }
  const e = env[spec.env];
  return e === undefined ? spec.default : e;
}

/**
 * Settings from parsed command-line options and an environment object: flag > env > default.
 * Every invalid value is reported at once in one {@link SettingsError}.
 */
export function resolveSettings(opts: ParsedOptions, env: Env, ro: ResolveOptions = {}): Settings {
  const errors: string[] = [];
  const specs = new Map(SETTING_SPECS.map((s) => [s.env, s]));
  const raw = (name: string): string => {
    const s = specs.get(name);
    if (!s) throw new Error(`unknown setting ${name}`);
    return rawValue(s, opts, env);
  };
  function guard<T>(fallback: T, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      if (!(err instanceof SettingsError)) throw err;
      errors.push(err.message);
      return fallback;
    }
  }
  const str = (n: string) => raw(n);
  const bool = (n: string) => guard(false, () => parseBool(n, raw(n)));
  const int = (n: string) => guard(0, () => parseInteger(n, raw(n)));
  const port = (n: string) => guard(0, () => parsePort(n, raw(n)));
  const address = (n: string) => guard('', () => parseListenAddress(n, raw(n)));
  const list = (n: string) => parseList(raw(n));

  const serviceAccountDir = str('SERVICE_ACCOUNT_DIR');
  const monitoringPort = int('MONITORING_PORT');
  if (monitoringPort > 65535) errors.push(`invalid MONITORING_PORT ${JSON.stringify(raw('MONITORING_PORT'))}: want a port 0-65535`);
  const logLevelFlag = opts['log_output_level'];
  const settings: Settings = {
    cniBinSourceDir: str('CNI_BIN_SOURCE_DIR'),
    cniBinTargetDirs: list('CNI_BIN_TARGET_DIRS'),
    mountedCniNetDir: str('MOUNTED_CNI_NET_DIR'),
    cniAgentRunDir: str('CNI_AGENT_RUN_DIR'),
    serviceAccountDir,
    hostProcDir: str('HOST_PROC_DIR'),
    hostNetnsDir: str('HOST_NETNS_DIR'),
    readinessPort: port('READINESS_PORT'),
    readinessAddress: address('READINESS_ADDRESS'),
    monitoringPort,
    monitoringAddress: address('MONITORING_ADDRESS'),
    cniConfName: str('CNI_CONF_NAME'),
    chainedCniPlugin: bool('CHAINED_CNI_PLUGIN'),
    istioOwnedCniConfig: bool('ISTIO_OWNED_CNI_CONFIG'),
    istioOwnedCniConfigFilename: str('ISTIO_OWNED_CNI_CONFIG_FILENAME') || DEFAULT_OWNED_CONFIG_FILENAME,
    kubeconfigMode: guard(0o600, () => parseFileMode('KUBECONFIG_MODE', raw('KUBECONFIG_MODE'))),
    cniConfGroupRead: bool('CNI_CONF_GROUP_READ'),
    kubeCaFile: str('KUBE_CA_FILE') || `${serviceAccountDir}/ca.crt`,
    skipTlsVerify: bool('SKIP_TLS_VERIFY'),
    ztunnelUdsAddress: str('ZTUNNEL_UDS_ADDRESS'),
    ambientEnabled: bool('AMBIENT_ENABLED'),
    enableAmbientDetectionRetry: bool('ENABLE_AMBIENT_DETECTION_RETRY'),
    repair: {
      enabled: bool('REPAIR_ENABLED'),
      repairPods: bool('REPAIR_REPAIR_PODS'),
      deletePods: bool('REPAIR_DELETE_PODS'),
      labelPods: bool('REPAIR_LABEL_PODS'),
      brokenPodLabelKey: str('REPAIR_BROKEN_POD_LABEL_KEY'),
      brokenPodLabelValue: str('REPAIR_BROKEN_POD_LABEL_VALUE'),
      nodeName: str('REPAIR_NODE_NAME'),
      sidecarAnnotation: str('REPAIR_SIDECAR_ANNOTATION'),
      initContainerName: str('REPAIR_INIT_CONTAINER_NAME'),
      initContainerTerminationMessage: str('REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE'),
      initContainerExitCode: int('REPAIR_INIT_CONTAINER_EXIT_CODE'),
      labelSelectors: str('REPAIR_LABEL_SELECTORS'),
      fieldSelectors: str('REPAIR_FIELD_SELECTORS'),
    },
    nodeTaint: { enabled: bool('NODE_TAINT_ENABLED'), key: str('NODE_TAINT_KEY') },
    verifyIntervalMs: guard(60_000, () => parseDurationMs('VERIFY_INTERVAL', raw('VERIFY_INTERVAL'))),
    verifyReportOnly: bool('VERIFY_REPORT_ONLY'),
    heapTrimIntervalMs: guard(60_000, () => parseDurationMs('HEAP_TRIM_INTERVAL', raw('HEAP_TRIM_INTERVAL'))),
    excludeNamespaces: list('EXCLUDE_NAMESPACES'),
    podNamespace: str('POD_NAMESPACE'),
    ambientEnablementSelector: str('AMBIENT_ENABLEMENT_SELECTOR'),
    enablementSelectors: guard([], () => parseEnablementSelectors(raw('AMBIENT_ENABLEMENT_SELECTOR'))),
    ambientDnsCapture: bool('AMBIENT_DNS_CAPTURE'),
    ambientIpv6: bool('AMBIENT_IPV6'),
    ambientDisableSafeUpgrade: bool('AMBIENT_DISABLE_SAFE_UPGRADE'),
    ambientReconcilePodRulesOnStartup: bool('AMBIENT_RECONCILE_POD_RULES_ON_STARTUP'),
    nativeNftables: bool('NATIVE_NFTABLES'),
    k8sServiceProtocol: str('KUBERNETES_SERVICE_PROTOCOL') || 'https',
    k8sServiceHost: str('KUBERNETES_SERVICE_HOST'),
    k8sServicePort: str('KUBERNETES_SERVICE_PORT'),
    k8sNodeName: str('KUBERNETES_NODE_NAME') || (ro.hostname ?? hostname)(),
    forceIptablesBinary: str('FORCE_IPTABLES_BINARY'),
    allowSwitchToHostNs: bool('ALLOW_SWITCH_TO_HOST_NS'),
    nodeName: str('NODE_NAME'),
    systemNamespace: str('SYSTEM_NAMESPACE') || 'istio-system',
    hostProbeSnatIp: str('HOST_PROBE_SNAT_IP'),
    hostProbeSnatIpv6: str('HOST_PROBE_SNAT_IPV6'),
    ambientEnableAwsBranchEniProbe: bool('AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE'),
    logLevels: guard(parseLogOutputLevel(undefined), () =>
      parseLogOutputLevel(typeof logLevelFlag === 'string' ? logLevelFlag : undefined),
    ),
  };
  if (
    settings.hostNetnsDir !== '' &&
    (!settings.hostNetnsDir.startsWith('/') || settings.hostNetnsDir.includes('\0') || settings.hostNetnsDir.split('/').includes('..'))
  ) {
    errors.push(`invalid HOST_NETNS_DIR ${JSON.stringify(settings.hostNetnsDir)}: want an absolute directory path without '..', or empty`);
  }
  if (settings.cniBinTargetDirs.length === 0) errors.push('invalid CNI_BIN_TARGET_DIRS "": want at least one directory');
  for (const [name, value] of [
    ['CNI_BIN_SOURCE_DIR', settings.cniBinSourceDir],
    ['MOUNTED_CNI_NET_DIR', settings.mountedCniNetDir],
    ['CNI_AGENT_RUN_DIR', settings.cniAgentRunDir],
  ] as const) {
    if (value === '') errors.push(`invalid ${name} "": want a directory`);
  }
  for (const [name, value] of [
    ['CNI_CONF_NAME', settings.cniConfName],
    ['ISTIO_OWNED_CNI_CONFIG_FILENAME', settings.istioOwnedCniConfigFilename],
  ] as const) {
    if (value.includes('/') || value === '.' || value === '..') {
      errors.push(`invalid ${name} ${JSON.stringify(value)}: want a file name inside MOUNTED_CNI_NET_DIR`);
    }
  }
  for (const ns of settings.excludeNamespaces) {
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(ns) || ns.length > 63) {
      errors.push(
        `invalid EXCLUDE_NAMESPACES ${JSON.stringify(raw('EXCLUDE_NAMESPACES'))}: ${JSON.stringify(ns)} is not a namespace name (lower-case letters, digits and '-', at most 63)`,
      );
    }
  }
  if (
    settings.nodeTaint.enabled &&
    !/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(settings.nodeTaint.key)
  ) {
    errors.push(`invalid NODE_TAINT_KEY ${JSON.stringify(settings.nodeTaint.key)}: want a taint key like cni.istio.io/not-ready`);
  }
  errors.push(...unsupportedSettingErrors(SETTING_SPECS, (s) => rawValue(s, opts, env)));
  errors.push(...logAsJsonErrors(opts['log_as_json']));
  if (errors.length > 0) throw new SettingsError(errors.join('; '));
  return settings;
}
