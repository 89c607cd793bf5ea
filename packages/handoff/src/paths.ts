/** File names inside the agent run dir (`cni_agent_run_dir`), shared by plugin and daemon (upstream `cni/pkg/constants`). */
export const PLUGIN_EVENT_SOCKET = 'pluginevent.sock';
export const LOG_SOCKET = 'log.sock';
export const PLUGIN_KUBECONFIG = 'istio-cni-kubeconfig';
export const DEFAULT_RUN_DIR = '/var/run/istio-cni';

export function runDirPath(runDir: string, name: string): string {
  return runDir.endsWith('/') ? runDir + name : `${runDir}/${name}`;
}
