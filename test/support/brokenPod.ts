/** A sidecar pod started before the plugin was installed: its `istio-validation` init container failed with 126. */
import type { KubeObject } from './fakeKubeApi.ts';
import { sidecarPod } from './meshPods.ts';

const VALIDATION_FAILURE =
  'iptables validation failed; workload is not ready for Istio. When using Istio CNI, this can occur if a pod is scheduled before the node is ready.';

export function brokenPod(name: string, podIp: string, initStatus: Record<string, unknown>): KubeObject {
  const pod = sidecarPod('default', name);
  return {
    ...pod,
    status: {
      phase: 'Pending',
      podIP: podIp,
      podIPs: [{ ip: podIp }],
      initContainerStatuses: [
        { name: 'istio-validation', ready: false, restartCount: 1, image: 'docker.io/istio/proxyv2:1.24.0', imageID: '', ...initStatus },
      ],
    },
  };
}

export const crashLooping = {
  state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 10s restarting failed container=istio-validation' } },
  lastState: { terminated: { exitCode: 126, reason: 'Error', message: VALIDATION_FAILURE } },
};
