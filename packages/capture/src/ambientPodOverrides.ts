import { AnnotationError } from './annotationError.ts';
import { ANNOTATION } from './annotationNames.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import { quoteForError } from '@istio-cni/cni';
import { MAX_VALUE_LENGTH, parseGoBool, parseInterfaceList } from './parseAnnotationValues.ts';
import type { Pod } from './podTypes.ts';

/** Pod annotations read by the ambient agent (values from `istio.io/api`). */
export const AMBIENT_ANNOTATION = {
  bypassInboundCapture: 'ambient.istio.io/bypass-inbound-capture',
  dnsCapture: 'ambient.istio.io/dns-capture',
  rerouteVirtualInterfaces: ANNOTATION.rerouteVirtualInterfaces,
  redirection: 'ambient.istio.io/redirection',
} as const;

/** A pod's DNS capture choice: `unset` follows the node-wide `AMBIENT_DNS_CAPTURE`. */
export type PodDnsOverride = 'unset' | 'enabled' | 'disabled';

/** Per-pod changes to the in-pod rules (upstream `PodLevelOverrides`). */
export interface AmbientPodOverrides {
  /** "Ingress mode": inbound traffic is not captured, only outbound. */
  readonly ingressMode: boolean;
  readonly dnsCapture: PodDnsOverride;
  /** Interfaces whose inbound TCP is treated as outbound (KubeVirt, VMs, DinD). */
  readonly virtualInterfaces: readonly string[];
}

export const DEFAULT_AMBIENT_POD_OVERRIDES: AmbientPodOverrides = {
  ingressMode: false,
  dnsCapture: 'unset',
  virtualInterfaces: [],
};

export interface AmbientPodOverridesResult {
  readonly overrides: AmbientPodOverrides;
  /** One line per ignored annotation, for the caller to log. */
  readonly warnings: string[];
}

/** Go `strconv.ParseBool` on the value; anything else is ignored with a warning, as upstream does. */
function readBool(annotations: Readonly<Record<string, string>>, name: string, warnings: string[]): boolean | undefined {
  const value = annotations[name];
  if (value === undefined) return undefined;
  const parsed = parseGoBool(value);
  if (parsed === undefined) {
    warnings.push(`annotation ${name}=${quoteForError(value)} found, but only boolean values are supported, ignoring`);
  }
  return parsed;
}

/**
 * Comma list with each item trimmed and empty items dropped (upstream trims, so `"en0, en1"` is
 * two interfaces). Each name must pass the capture interface-name check: the names go unquoted
 * into iptables-restore and nft scripts, so a bad one fails the pod rather than the tool.
 */
function parseVirtualInterfaces(value: string): string[] {
  if (value.length > MAX_VALUE_LENGTH) {
    throw new AnnotationError(AMBIENT_ANNOTATION.rerouteVirtualInterfaces, value, `value longer than ${MAX_VALUE_LENGTH} characters`);
  }
  const normalised = value
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '')
    .join(',');
  try {
    return parseInterfaceList(normalised);
  } catch (err) {
    throw new AnnotationError(AMBIENT_ANNOTATION.rerouteVirtualInterfaces, value, (err as Error).message);
  }
}

/**
 * Reads a pod's ambient overrides (`getPodLevelTrafficOverrides`). Non-boolean values of the two
 * boolean annotations are ignored and reported in `warnings`; an unusable interface name throws
 * `AnnotationError` (upstream would write it into the rules and fail at apply time).
 */
export function ambientPodOverrides(pod: Pod): AmbientPodOverridesResult {
  const annotations = pod.metadata.annotations ?? {};
  const warnings: string[] = [];
  const ingressMode = readBool(annotations, AMBIENT_ANNOTATION.bypassInboundCapture, warnings) ?? false;
  const dns = readBool(annotations, AMBIENT_ANNOTATION.dnsCapture, warnings);
  const virt = annotations[AMBIENT_ANNOTATION.rerouteVirtualInterfaces];
  return {
    overrides: {
      ingressMode,
      dnsCapture: dns === undefined ? 'unset' : dns ? 'enabled' : 'disabled',
      virtualInterfaces: virt === undefined ? [] : parseVirtualInterfaces(virt),
    },
    warnings,
  };
}

/** Whether DNS is captured for this pod: the pod's choice, else the node-wide setting. */
export function ambientRedirectDns(config: AmbientConfig, overrides: AmbientPodOverrides): boolean {
  switch (overrides.dnsCapture) {
    case 'enabled':
      return true;
    case 'disabled':
      return false;
    case 'unset':
      return config.redirectDns;
  }
}
