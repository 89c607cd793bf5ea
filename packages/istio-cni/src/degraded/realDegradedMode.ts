import { setTimeout as sleep } from 'node:timers/promises';
import {
  createExecCommandRunner,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
} from '@istio-cni/dataplane/sidecar';
import { captureEnvironmentFrom } from '@istio-cni/capture';
import { CniError, ErrorCode, type K8sArgs } from '@istio-cni/cni';
import { PLUGIN_KUBECONFIG, runDirPath, type Logger, type PluginConfig } from '@istio-cni/handoff';
import type { KubeClient } from '@istio-cni/kube';
import { getNamespace, getPod, pluginApiClient } from './apiReader.ts';
import { degradedAdd, degradedCheck, type DegradedDeps, type DegradedOutcome } from './degradedMode.ts';

const REQUEST_TIMEOUT_MS = 5_000;

/**
 * Degraded mode wired to the real world: the installer's kubeconfig, plain HTTPS to the API
 * server, and the same capture code the agent runs. Loaded only when the agent is unreachable.
 */
async function realDeps(config: PluginConfig): Promise<DegradedDeps> {
  const kubeconfigPath = runDirPath(config.cniAgentRunDir, PLUGIN_KUBECONFIG);
  let client: KubeClient;
  try {
    client = pluginApiClient(kubeconfigPath, REQUEST_TIMEOUT_MS);
  } catch (err) {
    throw new CniError(
      ErrorCode.TryAgainLater,
      'istio-cni node agent is not reachable and its kubeconfig cannot be read; retry once the agent runs',
      (err as Error).message,
    );
  }
  // The installer's copy of the daemon's setting wins; the runtime's environment is the fallback.
  const forceIptablesBinary = config.forceIptablesBinary || process.env.FORCE_IPTABLES_BINARY;
  const capture = createSidecarCaptureManager({
    runner: createExecCommandRunner(),
    openScratchNetns: createScratchNetnsOpener(),
    // The plugin runs on the host: its /proc is the host's.
    netnsGuard: createPodNetnsGuard({ hostProcDir: '/proc' }),
    nativeNftables: config.nativeNftables,
    env: captureEnvironmentFrom(process.env),
    ...(forceIptablesBinary ? { forceIptablesBinary } : {}),
  });
  return {
    getPod: (ns, name) => getPod(client, ns, name),
    getNamespace: (name) => getNamespace(client, name),
    applySidecar: (pod, netns, podIps) => capture.apply(pod, netns, podIps),
    verifySidecar: (pod, netns) => capture.verify(pod, netns),
    sleep: (ms) => sleep(ms),
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
