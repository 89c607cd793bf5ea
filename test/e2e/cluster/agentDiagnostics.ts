// What an operator reads from a node's agent through the API server: its verification log lines
// about one pod, and `kubectl exec ... install-cni doctor`.
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import type { KubeClient } from '../support/kubeClient.ts';
import { rigBinary } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';

export interface DriftLine {
  time: string;
  pod: string;
  msg: string;
  drift: { kind: string; detail: string }[];
  action: string;
}

/** The agent pod's JSON lines saying `pod` (namespace/name) drifted, logged at or after `since`. */
export async function driftLines(api: KubeClient, agentPod: string, pod: string, since: number): Promise<DriftLine[]> {
  const log = (await api.request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${agentPod}/log?container=install-cni`)).text;
  const lines: DriftLine[] = [];
  for (const l of log.split('\n')) {
    if (!l.includes('"component":"verify"')) continue;
    try {
      const parsed = JSON.parse(l) as DriftLine;
      if (parsed.pod === pod && parsed.msg === 'pod drifted from its plan' && Date.parse(parsed.time) >= since) lines.push(parsed);
    } catch {}
  }
  return lines;
}

/**
 * `kubectl exec -n istio-system <target> -c install-cni -- install-cni doctor ARGS`, as an operator
 * runs it (through the API server and kubelet; `crictl exec --sync` drops the output of a non-zero
 * exit). `target` is a pod name or `ds/<name>`.
 */
export function runDoctor(kubeconfig: string, target: string, args: readonly string[] = []) {
  return runCommand(
    [
      rigBinary('kubectl'),
      '--kubeconfig',
      kubeconfig,
      'exec',
      '-n',
      RELEASE_NAMESPACE,
      target,
      '-c',
      'install-cni',
      '--',
      'install-cni',
      'doctor',
      ...args,
    ],
    { allowFailure: true, timeoutMs: 60_000 },
  );
}
