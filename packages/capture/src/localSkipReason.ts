import { isAgentPod, isKubernetesPod } from './sidecarDecision.ts';

export interface LocalPolicy {
  /** Namespace of the agent's DaemonSet (`pod_namespace`). */
  agentNamespace: string;
  excludeNamespaces: readonly string[];
}

/**
 * The decisions made from CNI_ARGS alone, before any pod lookup (upstream `CmdAdd` steps, in that
 * order): the agent's own pod, non-Kubernetes invocations and excluded namespaces pass through.
 * `undefined` means the pod must be looked up. Shared by the plugin and the agent.
 */
export function localSkipReason(podName: string, podNamespace: string, policy: LocalPolicy): string | undefined {
  if (isAgentPod(podName, podNamespace, policy.agentNamespace)) return 'istio-cni agent pod';
  if (!isKubernetesPod(podName, podNamespace)) return 'not a kubernetes pod';
  if (policy.excludeNamespaces.includes(podNamespace)) return 'excluded namespace';
  return undefined;
}
