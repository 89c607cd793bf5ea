/** File names inside the agent run dir (`cni_agent_run_dir`), shared by plugin and daemon (upstream `cni/pkg/constants`). */
export const PLUGIN_EVENT_SOCKET = 'pluginevent.sock';
export const LOG_SOCKET = 'log.sock';
export const PLUGIN_KUBECONFIG = 'istio-cni-kubeconfig';
export const DEFAULT_RUN_DIR = '/var/run/istio-cni';
/** Mode of the run dir when the daemon creates it: the sockets and kubeconfig inside are root's alone. */
export const RUN_DIR_MODE = 0o750;
/**
 * Not upstream: written by an agent that stops for an upgrade and keeps the plugin chained, removed by
 * its successor once ready. While it is younger than UPGRADE_HANDOVER_GRACE_MS, STATUS succeeds with
 * no agent (docs/architecture.md "Degraded mode", STATUS).
 */
export const UPGRADE_HANDOVER = 'upgrade-handover';
export const UPGRADE_HANDOVER_GRACE_MS = 60_000;

export function runDirPath(runDir: string, name: string): string {
  return runDir.endsWith('/') ? runDir + name : `${runDir}/${name}`;
}
