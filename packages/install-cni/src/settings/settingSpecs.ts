/**
 * Every setting of the daemon (upstream `cni/pkg/cmd/root.go`, plus our host paths). A setting with
 * `flag: true` is also a command-line flag named after its env var (`CNI_CONF_NAME` →
 * `--cni-conf-name`), as upstream's viper binding does; flag beats env beats default.
 */
export type SettingKind = 'string' | 'bool' | 'int' | 'port' | 'mode' | 'list';

export interface SettingSpec {
  env: string;
  kind: SettingKind;
  /** As a user would write it; a `mode` in octal with a leading 0 (`0600`), never decimal. */
  default: string;
  flag: boolean;
  help: string;
}

function spec(env: string, kind: SettingKind, def: string, flag: boolean, help: string): SettingSpec {
  return { env, kind, default: def, flag, help };
}

export const SETTING_SPECS: readonly SettingSpec[] = [
  // Host paths (upstream hard-codes them; settings here so a test can use a scratch host root).
  spec('CNI_BIN_SOURCE_DIR', 'string', '/opt/cni/bin', true, 'directory holding the plugin executable to install'),
  spec('CNI_BIN_TARGET_DIRS', 'list', '/host/opt/cni/bin', true, 'comma-separated directories to install the plugin into'),
  spec('MOUNTED_CNI_NET_DIR', 'string', '/host/etc/cni/net.d', true, 'CNI network config directory'),
  spec('CNI_AGENT_RUN_DIR', 'string', '/var/run/istio-cni', true, 'agent run directory (sockets, plugin kubeconfig)'),
  spec('SERVICE_ACCOUNT_DIR', 'string', '/var/run/secrets/kubernetes.io/serviceaccount', true, 'service account directory (token, ca.crt)'),
  spec('HOST_PROC_DIR', 'string', '/host/proc', true, 'host procfs'),
  spec(
    'HOST_NETNS_DIR',
    'string',
    '/var/run/netns',
    true,
    "the runtime's pod netns directory as mounted in the agent (the chart's cniNetnsDir), searched by pod IP for a pod netns no process holds (CRI-O drop_infra_ctr); empty = procfs only",
  ),
  spec('READINESS_PORT', 'port', '8000', true, 'port of /healthz and /readyz (0 picks a free port)'),
  spec('MONITORING_PORT', 'int', '15014', true, 'port of /metrics (<= 0 disables)'),
  // Beyond upstream, which listens on every address: a node can keep both off its external network.
  spec('READINESS_ADDRESS', 'string', '', true, 'IP address /healthz and /readyz listen on (empty = every address, as upstream)'),
  spec('MONITORING_ADDRESS', 'string', '', true, 'IP address /metrics listens on (empty = every address, as upstream)'),
  // Installer.
  spec('CNI_CONF_NAME', 'string', '', true, 'primary CNI config file to modify; empty = auto-detect'),
  spec('CHAINED_CNI_PLUGIN', 'bool', 'true', true, 'install as a chained plugin (else standalone)'),
  spec('ISTIO_OWNED_CNI_CONFIG', 'bool', 'false', true, 'write a separate higher-priority conflist (chained + ambient only)'),
  spec('ISTIO_OWNED_CNI_CONFIG_FILENAME', 'string', '', true, 'name of the Istio-owned conflist (default 02-istio-cni.conflist)'),
  spec('KUBECONFIG_MODE', 'mode', '0600', true, 'file mode of the plugin kubeconfig'),
  spec('CNI_CONF_GROUP_READ', 'bool', 'false', true, 'create files with mode 0640 instead of 0600'),
  spec('KUBE_CA_FILE', 'string', '', true, 'CA file for the plugin kubeconfig (default <sa>/ca.crt)'),
  spec('SKIP_TLS_VERIFY', 'bool', 'false', true, 'plugin kubeconfig skips TLS verification'),
  spec('ZTUNNEL_UDS_ADDRESS', 'string', '/var/run/ztunnel/ztunnel.sock', true, 'ZDS socket path'),
  spec('AMBIENT_ENABLED', 'bool', 'false', true, 'enable the ambient node agent'),
  spec('ENABLE_AMBIENT_DETECTION_RETRY', 'bool', 'false', true, 'plugin retries ambient detection'),
  spec(
    'CNI_NETWORK_CONFIG',
    'string',
    '',
    true,
    'upstream legacy; not supported: a value other than the default stops the daemon at start',
  ),
  spec(
    'CNI_NETWORK_CONFIG_FILE',
    'string',
    '',
    true,
    'upstream legacy; not supported: a value other than the default stops the daemon at start',
  ),
  spec('LOG_LEVEL', 'string', 'warn', true, 'upstream legacy; not supported: a value other than the default stops the daemon at start'),
  // Repair controller.
  spec('REPAIR_ENABLED', 'bool', 'true', true, 'run the repair controller'),
  spec('REPAIR_DELETE_PODS', 'bool', 'false', true, 'repair by deleting broken pods'),
  spec('REPAIR_LABEL_PODS', 'bool', 'false', true, 'repair by labelling broken pods'),
  spec('REPAIR_BROKEN_POD_LABEL_KEY', 'string', 'cni.istio.io/uninitialized', true, 'label key for broken pods'),
  spec('REPAIR_BROKEN_POD_LABEL_VALUE', 'string', 'true', true, 'label value for broken pods'),
  spec('REPAIR_NODE_NAME', 'string', '', true, 'node whose pods are repaired'),
  spec('REPAIR_SIDECAR_ANNOTATION', 'string', 'sidecar.istio.io/status', true, 'annotation marking injected pods'),
  spec('REPAIR_INIT_CONTAINER_NAME', 'string', 'istio-validation', true, 'validation init container name'),
  spec('REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE', 'string', '', true, 'termination message filter'),
  spec('REPAIR_INIT_CONTAINER_EXIT_CODE', 'int', '126', true, 'exit code filter'),
  spec('REPAIR_LABEL_SELECTORS', 'string', '', true, 'pod label selector'),
  spec('REPAIR_FIELD_SELECTORS', 'string', '', true, 'pod field selector'),
  // Node readiness taint (beyond upstream; off by default).
  spec('NODE_TAINT_ENABLED', 'bool', 'false', true, 'remove NODE_TAINT_KEY (NoSchedule) from this node once the daemon is ready'),
  spec('NODE_TAINT_KEY', 'string', 'cni.istio.io/not-ready', true, 'key of the NoSchedule readiness taint to remove'),
  // Continuous verification (beyond upstream; docs/architecture.md, "Verification").
  spec(
    'VERIFY_INTERVAL',
    'string',
    '60s',
    true,
    'every managed pod is checked against its plan once per interval, spread over it (0 = off)',
  ),
  spec('VERIFY_REPORT_ONLY', 'bool', 'false', true, 'log and count drift found by verification without repairing it'),
  // Beyond upstream (docs/architecture.md, "Heap trims").
  spec(
    'HEAP_TRIM_INTERVAL',
    'string',
    '60s',
    false,
    'how often the daemon hands back heap it grew by 1 MiB or more since the last time (0 = leave it to V8)',
  ),
  // Env-only (viper keys without flags).
  spec('REPAIR_REPAIR_PODS', 'bool', 'false', false, 'repair pods in place'),
  spec('EXCLUDE_NAMESPACES', 'list', '', false, 'namespaces the plugin skips'),
  spec('POD_NAMESPACE', 'string', '', false, 'namespace of the daemon'),
  spec('AMBIENT_ENABLEMENT_SELECTOR', 'string', '', false, 'YAML list of ambient enablement selectors'),
  spec('AMBIENT_DNS_CAPTURE', 'bool', 'false', false, 'ambient DNS capture'),
  spec('AMBIENT_IPV6', 'bool', 'false', false, 'ambient IPv6 rules'),
  spec('AMBIENT_DISABLE_SAFE_UPGRADE', 'bool', 'false', false, 'always clean up on shutdown'),
  spec('AMBIENT_RECONCILE_POD_RULES_ON_STARTUP', 'bool', 'false', false, 'reconcile in-pod rules on start-up'),
  spec('NATIVE_NFTABLES', 'bool', 'false', false, 'use nftables'),
  // Plain environment.
  spec('KUBERNETES_SERVICE_PROTOCOL', 'string', 'https', false, 'API server protocol'),
  spec('KUBERNETES_SERVICE_HOST', 'string', '', false, 'API server host'),
  spec('KUBERNETES_SERVICE_PORT', 'string', '', false, 'API server port'),
  spec('KUBERNETES_NODE_NAME', 'string', '', false, 'node name (default: hostname)'),
  spec('FORCE_IPTABLES_BINARY', 'string', '', false, 'iptables binary to use'),
  spec('ALLOW_SWITCH_TO_HOST_NS', 'bool', 'false', false, 'allow entering the host netns'),
  spec('NODE_NAME', 'string', '', false, 'node name (downward API)'),
  spec('SYSTEM_NAMESPACE', 'string', 'istio-system', false, 'Istio system namespace'),
  spec('REVISION', 'string', '', false, 'Istio revision; not supported: a value other than the default stops the daemon at start'),
  spec('HOST_PROBE_SNAT_IP', 'string', '', false, 'SNAT address of host probes'),
  spec('HOST_PROBE_SNAT_IPV6', 'string', '', false, 'IPv6 SNAT address of host probes'),
  spec('AMBIENT_USE_SCOPED_XTABLES_LOCKING', 'bool', 'true', false, 'scoped xtables locking (always on; false stops the daemon at start)'),
  spec('AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE', 'bool', 'true', false, 'AWS branch ENI probe rules'),
];

/** `CNI_CONF_NAME` → `cni-conf-name`. */
export function flagName(env: string): string {
  return env.toLowerCase().replaceAll('_', '-');
}

/** `cni-conf-name` → `cniConfName` (commander's attribute name). */
export function attributeName(flag: string): string {
  return flag.replace(/-([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}
