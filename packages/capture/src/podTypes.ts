/**
 * The subset of the Kubernetes `core/v1` Pod and Namespace objects that the CNI plugin and agent
 * read. Every field is optional because the API omits empty ones.
 */

export interface EnvVar {
  readonly name: string;
  readonly value?: string;
}

export interface SecurityContext {
  readonly runAsUser?: number;
  readonly runAsGroup?: number;
}

export interface Container {
  readonly name: string;
  readonly args?: readonly string[];
  readonly env?: readonly EnvVar[];
  readonly securityContext?: SecurityContext;
}

export interface ObjectMeta {
  readonly name?: string;
  readonly namespace?: string;
  readonly uid?: string;
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
  /** Set once deletion has been requested (RFC 3339). */
  readonly deletionTimestamp?: string;
}

export interface PodSpec {
  readonly containers?: readonly Container[];
  readonly initContainers?: readonly Container[];
  readonly hostNetwork?: boolean;
  readonly serviceAccountName?: string;
  readonly nodeName?: string;
}

export interface PodIP {
  readonly ip: string;
}

export interface PodStatus {
  readonly phase?: string;
  readonly podIP?: string;
  readonly podIPs?: readonly PodIP[];
}

export interface Pod {
  readonly apiVersion?: string;
  readonly kind?: string;
  readonly metadata: ObjectMeta;
  readonly spec?: PodSpec;
  readonly status?: PodStatus;
}

export interface Namespace {
  readonly apiVersion?: string;
  readonly kind?: string;
  readonly metadata: ObjectMeta;
}

export const PROXY_CONTAINER_NAME = 'istio-proxy';
export const INIT_CONTAINER_NAME = 'istio-init';

/** The `istio-proxy` container, looked up in `initContainers` (native sidecar) then `containers`. */
export function findProxyContainer(pod: Pod): Container | undefined {
  const all = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  return all.find((c) => c.name === PROXY_CONTAINER_NAME);
}

/** The proxy container's env as a map; later duplicates win, like upstream's map fill. */
export function proxyEnvironment(pod: Pod): Map<string, string> {
  const env = new Map<string, string>();
  for (const e of findProxyContainer(pod)?.env ?? []) env.set(e.name, e.value ?? '');
  return env;
}
