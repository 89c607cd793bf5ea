import type { SidecarCaptureManager } from '@istio-cni/dataplane/sidecar';
import { CniError, ErrorCode, type K8sArgs } from '@istio-cni/cni';
import { stat } from 'node:fs/promises';
import { PLUGIN_KUBECONFIG, UPGRADE_HANDOVER, runDirPath, type Logger, type PluginConfig } from '@istio-cni/handoff';
import type { KubeClient } from '@istio-cni/kube/client';
import { getNamespace, getPod, pluginApiClient, probePodRead } from './apiReader.ts';
import { degradedAdd, degradedCheck, degradedStatus, type DegradedDeps, type DegradedOutcome } from './degradedMode.ts';

const REQUEST_TIMEOUT_MS = 5_000;
/** STATUS runs on every runtime status check (every few seconds): one short attempt, no retries. */
const STATUS_PROBE_TIMEOUT_MS = 2_000;

/**
 * Degraded mode wired to the real world: the installer's kubeconfig, plain HTTPS to the API
 * server, and the same capture code the agent runs. Loaded only when the agent is unreachable; the
 * capture code (child processes, iptables backends) only once a pod needs it, so a pod passed
 * through does not pay for it.
 */
async function realDeps(config: PluginConfig): Promise<DegradedDeps> {
  const kubeconfigPath = runDirPath(config.cniAgentRunDir, PLUGIN_KUBECONFIG);
  let client: KubeClient;
  try {
    client = await pluginApiClient(kubeconfigPath, REQUEST_TIMEOUT_MS);
  } catch (err) {
    throw new CniError(
      ErrorCode.TryAgainLater,
      'istio-cni node agent is not reachable and its kubeconfig cannot be read; retry once the agent runs',
      (err as Error).message,
    );
  }
  let capture: SidecarCaptureManager | undefined;
  const sidecarCapture = async () => (capture ??= (await import('./sidecarCapture.ts')).pluginSidecarCapture(config));
  return {
    getPod: (ns, name) => getPod(client, ns, name),
    getNamespace: (name) => getNamespace(client, name),
    applySidecar: async (pod, netns, podIps) => (await sidecarCapture()).apply(pod, netns, podIps),
    verifySidecar: async (pod, netns) => (await sidecarCapture()).verify(pod, netns),
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    now: () => Date.now(),
  };
}

export async function runDegradedAdd(
  config: PluginConfig,
  k8s: K8sArgs,
  netns: string,
  podIps: readonly string[],
  log: Logger,
): Promise<DegradedOutcome> {
  return degradedAdd(await realDeps(config), config, k8s, netns, podIps, log);
}

export async function runDegradedCheck(config: PluginConfig, k8s: K8sArgs, netns: string): Promise<void> {
  return degradedCheck(await realDeps(config), config, k8s, netns);
}

/** STATUS with the agent not ready: `undefined` when degraded mode could serve ADDs now, else why not. */
export async function runDegradedStatus(config: PluginConfig): Promise<string | undefined> {
  return degradedStatus(
    config,
    async () => {
      const kubeconfigPath = runDirPath(config.cniAgentRunDir, PLUGIN_KUBECONFIG);
      await probePodRead(await pluginApiClient(kubeconfigPath, STATUS_PROBE_TIMEOUT_MS));
    },
    async () => {
      try {
        return Date.now() - (await stat(runDirPath(config.cniAgentRunDir, UPGRADE_HANDOVER))).mtimeMs;
      } catch {
        return undefined;
      }
    },
  );
}
