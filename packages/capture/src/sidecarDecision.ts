import { ANNOTATION, LABEL } from './annotationNames.ts';
import { parseGoBool } from './parseAnnotationValues.ts';
import { findProxyContainer, INIT_CONTAINER_NAME, proxyEnvironment } from './podTypes.ts';
import type { Pod } from './podTypes.ts';

export type SidecarDecision = { readonly redirect: true } | { readonly redirect: false; readonly reason: string };

const AGENT_POD_PREFIX = 'istio-cni-node-';

/**
 * True when the pod looks like our own node agent (upstream `CmdAdd`): the plugin lets it through
 * before touching the API, so a node whose agent is not up yet cannot deadlock.
 */
export function isAgentPod(podName: string, podNamespace: string, agentNamespace: string): boolean {
  return podName.startsWith(AGENT_POD_PREFIX) && podNamespace === agentNamespace;
}

/** Upstream `CmdAdd`: CNI_ARGS without pod identity means this is not a Kubernetes pod. */
export function isKubernetesPod(podName: string, podNamespace: string): boolean {
  return podName !== '' && podNamespace !== '';
}

/**
 * Whether the plugin should program sidecar redirection for this pod (upstream `CmdAdd`), checked in
 * upstream order; the first matching skip reason wins.
 */
export function sidecarDecision(pod: Pod): SidecarDecision {
  const names = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].map((c) => c.name);
  if (names.includes(INIT_CONTAINER_NAME)) {
    return { redirect: false, reason: 'pod has an istio-init container (redirects itself)' };
  }
  const env = proxyEnvironment(pod);
  const disableEnvoy = env.get('DISABLE_ENVOY');
  if (disableEnvoy !== undefined && parseGoBool(disableEnvoy) === true) {
    return { redirect: false, reason: 'DISABLE_ENVOY is set on istio-proxy' };
  }
  const proxy = findProxyContainer(pod);
  if (proxy === undefined) {
    return { redirect: false, reason: 'pod has no istio-proxy container' };
  }
  const args = proxy.args ?? [];
  if (args.length >= 2 && args[0] === 'proxy' && args[1] !== 'sidecar') {
    return { redirect: false, reason: `istio-proxy has proxy type ${JSON.stringify(args[1])}, not sidecar` };
  }
  const labels = pod.metadata.labels ?? {};
  const annotations = pod.metadata.annotations ?? {};
  // The label is the newer API and wins when both are present; non-boolean values are ignored.
  const inject = Object.hasOwn(labels, LABEL.inject) ? labels[LABEL.inject] : annotations[ANNOTATION.inject];
  if (inject !== undefined && inject !== '' && parseGoBool(inject) === false) {
    return { redirect: false, reason: `injection disabled by sidecar.istio.io/inject=${JSON.stringify(inject)}` };
  }
  if (!Object.hasOwn(annotations, ANNOTATION.status)) {
    return { redirect: false, reason: 'pod has no sidecar.istio.io/status annotation' };
  }
  return { redirect: true };
}
