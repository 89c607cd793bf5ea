import { localSkipReason, type LocalPolicy } from '@istio-cni/capture';
import { ErrorCode } from '@istio-cni/cni';
import { PROTOCOL } from '@istio-cni/handoff';
import type { HandoffHandler } from './handoffServer.ts';

/**
 * The agent's answer when it has no Kubernetes API access (KUBERNETES_SERVICE_HOST and KUBECONFIG
 * unset, e.g. running the installer alone): pods decided from CNI_ARGS pass through; any other pod
 * fails closed with "try again later" rather than starting without the capture it may need.
 */
export function noApiHandler(policy: LocalPolicy): HandoffHandler {
  return async (request) => {
    if (request.command !== 'ADD' && request.command !== 'CHECK') return { protocol: PROTOCOL, verdict: 'ok' };
    const skip = localSkipReason(request.pod.name, request.pod.namespace, policy);
    if (skip) return { protocol: PROTOCOL, verdict: 'skipped', reason: skip };
    return {
      error: {
        code: ErrorCode.TryAgainLater,
        msg: 'istio-cni agent has no Kubernetes API access (set KUBERNETES_SERVICE_HOST/PORT or KUBECONFIG); cannot decide this pod',
      },
    };
  };
}
