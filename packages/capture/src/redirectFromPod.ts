import { AnnotationError } from './annotationError.ts';
import { ANNOTATION } from './annotationNames.ts';
import type { Cidr } from '@istio-cni/cni';
import {
  parseCidrList,
  parseCidrListOrWildcard,
  parseGoBool,
  parseInterfaceList,
  parsePortList,
  parsePortListOrWildcard,
} from './parseAnnotationValues.ts';
import type { Wildcard } from './parseAnnotationValues.ts';
import { findProxyContainer, proxyEnvironment } from './podTypes.ts';
import type { Pod } from './podTypes.ts';

export type InterceptionMode = 'REDIRECT' | 'TPROXY';

/** Sidecar redirect parameters of one pod (upstream `sidecar_redirect.go`), every value already parsed and validated. */
export interface Redirect {
  readonly targetPort: number;
  readonly interceptionMode: InterceptionMode;
  readonly proxyUid: number;
  readonly proxyGid: number;
  readonly includeOutboundIPRanges: readonly Cidr[] | Wildcard;
  readonly excludeOutboundIPRanges: readonly Cidr[];
  readonly includeInboundPorts: readonly number[] | Wildcard;
  readonly excludeInboundPorts: readonly number[];
  readonly includeOutboundPorts: readonly number[];
  readonly excludeOutboundPorts: readonly number[];
  readonly excludeInterfaces: readonly string[];
  readonly rerouteVirtualInterfaces: readonly string[];
  readonly dnsRedirect: boolean;
  readonly dualStack: boolean;
  readonly invalidDrop: boolean;
}

export const DEFAULT_PROXY_PORT = 15001;
export const DEFAULT_PROXY_ID = 1337;
const PROXY_STATUS_PORT = 15020;
/** Always excluded from inbound capture: status, health, Envoy Prometheus. */
export const ALWAYS_EXCLUDED_INBOUND_PORTS: readonly number[] = [15020, 15021, 15090];

function dedup<T>(items: readonly T[]): T[] {
  return [...new Set(items)];
}

type Annotations = Readonly<Record<string, string>>;

function readAnnotation<T>(annotations: Annotations, name: string, parse: (value: string) => T, fallback: T): T {
  if (!Object.hasOwn(annotations, name)) return fallback;
  const value = annotations[name];
  if (typeof value !== 'string') throw new AnnotationError(name, String(value), 'value is not a string');
  try {
    return parse(value);
  } catch (err) {
    throw new AnnotationError(name, value, (err as Error).message);
  }
}

function noWildcard(parse: (value: string) => number[]): (value: string) => number[] {
  return (value) => {
    // Upstream accepts `*` here and then writes `--dport *`, which iptables rejects later.
    if (value.trim() === '*') throw new Error("'*' is not supported here");
    return parse(value);
  };
}

function parseMode(value: string): InterceptionMode {
  if (value === 'REDIRECT' || value === 'TPROXY') return value;
  throw new Error('must be REDIRECT or TPROXY');
}

function proxyId(pod: Pod, field: 'runAsUser' | 'runAsGroup'): number {
  const raw = findProxyContainer(pod)?.securityContext?.[field];
  if (raw === undefined || raw === null) return DEFAULT_PROXY_ID;
  if (typeof raw !== 'number' || !Number.isSafeInteger(raw) || raw < 0 || raw > 0xffffffff) {
    throw new AnnotationError(`istio-proxy securityContext.${field}`, String(raw), 'must be an integer 0-4294967295');
  }
  // 0 (root) is treated as unset, as upstream does.
  return raw === 0 ? DEFAULT_PROXY_ID : raw;
}

function envBool(env: Map<string, string>, name: string): boolean {
  const value = env.get(name);
  if (value === undefined) return false;
  // Upstream only warns on a bad value and keeps false.
  return parseGoBool(value) ?? false;
}

/**
 * Builds the redirect for a sidecar pod from its annotations and `istio-proxy` container.
 * Throws AnnotationError (naming annotation and value) for any value that does not parse.
 */
export function redirectFromPod(pod: Pod): Redirect {
  const annotations: Annotations = pod.metadata.annotations ?? {};
  const interceptionMode = readAnnotation(annotations, ANNOTATION.interceptionMode, parseMode, 'REDIRECT');
  const includeOutboundIPRanges = readAnnotation<readonly Cidr[] | Wildcard>(
    annotations,
    ANNOTATION.includeOutboundIPRanges,
    parseCidrListOrWildcard,
    '*',
  );
  const excludeOutboundIPRanges = readAnnotation(annotations, ANNOTATION.excludeOutboundIPRanges, parseCidrList, []);
  const excludeInbound = readAnnotation(annotations, ANNOTATION.excludeInboundPorts, noWildcard(parsePortList), [PROXY_STATUS_PORT]);
  const includeInboundPorts = readAnnotation<readonly number[] | Wildcard>(
    annotations,
    ANNOTATION.includeInboundPorts,
    parsePortListOrWildcard,
    '*',
  );
  const excludeOutboundPorts = readAnnotation(annotations, ANNOTATION.excludeOutboundPorts, noWildcard(parsePortList), [PROXY_STATUS_PORT]);
  const includeOutboundPorts = readAnnotation(annotations, ANNOTATION.includeOutboundPorts, noWildcard(parsePortList), []);
  const excludeInterfaces = readAnnotation(annotations, ANNOTATION.excludeInterfaces, parseInterfaceList, []);
  // The deprecated kubevirt annotation is read only when the new one is absent.
  const rerouteVirtualInterfaces = Object.hasOwn(annotations, ANNOTATION.rerouteVirtualInterfaces)
    ? readAnnotation(annotations, ANNOTATION.rerouteVirtualInterfaces, parseInterfaceList, [])
    : readAnnotation(annotations, ANNOTATION.kubevirtInterfaces, parseInterfaceList, []);
  const env = proxyEnvironment(pod);
  return {
    targetPort: DEFAULT_PROXY_PORT,
    interceptionMode,
    proxyUid: proxyId(pod, 'runAsUser'),
    proxyGid: proxyId(pod, 'runAsGroup'),
    includeOutboundIPRanges,
    excludeOutboundIPRanges,
    includeInboundPorts,
    excludeInboundPorts: dedup([...excludeInbound, ...ALWAYS_EXCLUDED_INBOUND_PORTS]),
    includeOutboundPorts,
    excludeOutboundPorts,
    excludeInterfaces,
    rerouteVirtualInterfaces,
    dnsRedirect: envBool(env, 'ISTIO_META_DNS_CAPTURE'),
    dualStack: envBool(env, 'ISTIO_DUAL_STACK'),
    invalidDrop: envBool(env, 'INVALID_DROP'),
  };
}
