import { AnnotationError } from './annotationError.ts';
import type { Cidr, IpAddress } from '@istio-cni/cni';
import { parseCidr } from '@istio-cni/cni';
import { parseGroupList, parseGroupListOrWildcard } from './parseAnnotationValues.ts';
import type { Wildcard } from './parseAnnotationValues.ts';
import type { InterceptionMode, Redirect } from './redirectFromPod.ts';

/**
 * Input of the sidecar rule builders: the istio-iptables configuration (`tools/common/config`)
 * restricted to what shapes the rules, with every list already parsed.
 */
export interface CaptureConfig {
  readonly proxyPort: number;
  readonly inboundCapturePort: number;
  readonly inboundTunnelPort: number;
  readonly proxyUid: readonly number[];
  readonly proxyGid: readonly number[];
  readonly inboundInterceptionMode: InterceptionMode;
  readonly inboundTProxyMark: number;
  readonly inboundTProxyRouteTable: number;
  /** `*` = all ports; empty = no inbound capture at all. */
  readonly inboundPortsInclude: readonly number[] | Wildcard;
  /** Used only when `inboundPortsInclude` is `*`. */
  readonly inboundPortsExclude: readonly number[];
  readonly ownerGroupsInclude: readonly string[] | Wildcard;
  readonly ownerGroupsExclude: readonly string[];
  readonly outboundPortsInclude: readonly number[];
  readonly outboundPortsExclude: readonly number[];
  /** `*` = all; empty = no final redirect rule. */
  readonly outboundIPRangesInclude: readonly Cidr[] | Wildcard;
  readonly outboundIPRangesExclude: readonly Cidr[];
  readonly rerouteVirtualInterfaces: readonly string[];
  readonly excludeInterfaces: readonly string[];
  readonly redirectDns: boolean;
  readonly captureAllDns: boolean;
  readonly dropInvalid: boolean;
  readonly enableIPv6: boolean;
  readonly dualStack: boolean;
  readonly dnsServersV4: readonly IpAddress[];
  readonly dnsServersV6: readonly IpAddress[];
  /** Written verbatim into v4 rules (`127.0.0.1/8` stays as is). */
  readonly hostIPv4LoopbackCidr: Cidr;
}

export const DNS_PROXY_PORT = 15053;
export const OUTBOUND_MARK = 1338;

/** `tools/common/config.DefaultConfig` values that shape rules. */
export const DEFAULT_CAPTURE_CONFIG: CaptureConfig = {
  proxyPort: 15001,
  inboundCapturePort: 15006,
  inboundTunnelPort: 15008,
  proxyUid: [1337],
  proxyGid: [1337],
  inboundInterceptionMode: 'REDIRECT',
  inboundTProxyMark: 1337,
  inboundTProxyRouteTable: 133,
  inboundPortsInclude: [],
  inboundPortsExclude: [],
  ownerGroupsInclude: '*',
  ownerGroupsExclude: [],
  outboundPortsInclude: [],
  outboundPortsExclude: [],
  outboundIPRangesInclude: [],
  outboundIPRangesExclude: [],
  rerouteVirtualInterfaces: [],
  excludeInterfaces: [],
  redirectDns: false,
  captureAllDns: false,
  dropInvalid: false,
  enableIPv6: false,
  dualStack: false,
  dnsServersV4: [],
  dnsServersV6: [],
  hostIPv4LoopbackCidr: parseCidr('127.0.0.1/32'),
};

/** Process-level settings the plugin reads inside the pod netns (`FillConfigFromEnvironment`). */
export interface CaptureEnvironment {
  readonly ISTIO_OUTBOUND_OWNER_GROUPS?: string;
  readonly ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE?: string;
  readonly ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR?: string;
  /** Result of the pod-netns address probe (first usable address is IPv6). */
  readonly enableIPv6?: boolean;
}

function readEnv<T>(name: string, value: string | undefined, parse: (v: string) => T, fallback: T): T {
  if (value === undefined) return fallback;
  try {
    return parse(value);
  } catch (err) {
    throw new AnnotationError(name, value, (err as Error).message);
  }
}

function parseV4LoopbackCidr(value: string): Cidr {
  const cidr = parseCidr(value);
  if (cidr.family !== 4) throw new Error('must be an IPv4 CIDR');
  return cidr;
}

/**
 * The capture configuration the plugin runs for a sidecar pod: defaults, then the pod's redirect,
 * then the environment (`cni/pkg/plugin/sidecar_iptables_linux.go`). Redirect-DNS and capture-all
 * DNS are both driven by the proxy's `ISTIO_META_DNS_CAPTURE`, so no resolv.conf is needed.
 */
export function captureConfigFromRedirect(redirect: Redirect, env: CaptureEnvironment = {}): CaptureConfig {
  return {
    ...DEFAULT_CAPTURE_CONFIG,
    proxyPort: redirect.targetPort,
    proxyUid: [redirect.proxyUid],
    proxyGid: [redirect.proxyGid],
    inboundInterceptionMode: redirect.interceptionMode,
    outboundIPRangesInclude: redirect.includeOutboundIPRanges,
    outboundIPRangesExclude: redirect.excludeOutboundIPRanges,
    inboundPortsInclude: redirect.includeInboundPorts,
    inboundPortsExclude: redirect.excludeInboundPorts,
    outboundPortsInclude: redirect.includeOutboundPorts,
    outboundPortsExclude: redirect.excludeOutboundPorts,
    excludeInterfaces: redirect.excludeInterfaces,
    rerouteVirtualInterfaces: redirect.rerouteVirtualInterfaces,
    redirectDns: redirect.dnsRedirect,
    captureAllDns: redirect.dnsRedirect,
    dropInvalid: redirect.invalidDrop,
    dualStack: redirect.dualStack,
    enableIPv6: env.enableIPv6 ?? false,
    ownerGroupsInclude: readEnv(
      'ISTIO_OUTBOUND_OWNER_GROUPS',
      env.ISTIO_OUTBOUND_OWNER_GROUPS,
      parseGroupListOrWildcard,
      DEFAULT_CAPTURE_CONFIG.ownerGroupsInclude,
    ),
    ownerGroupsExclude: readEnv(
      'ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE',
      env.ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE,
      parseGroupList,
      DEFAULT_CAPTURE_CONFIG.ownerGroupsExclude,
    ),
    hostIPv4LoopbackCidr: readEnv(
      'ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR',
      env.ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR,
      parseV4LoopbackCidr,
      DEFAULT_CAPTURE_CONFIG.hostIPv4LoopbackCidr,
    ),
  };
}

const CAPTURE_ENV_KEYS = [
  'ISTIO_OUTBOUND_OWNER_GROUPS',
  'ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE',
  'ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR',
] as const;

/** Picks the capture variables out of a process environment (read once, then passed down). */
export function captureEnvironmentFrom(env: Readonly<Record<string, string | undefined>>): CaptureEnvironment {
  const out: { -readonly [K in (typeof CAPTURE_ENV_KEYS)[number]]?: string } = {};
  for (const key of CAPTURE_ENV_KEYS) {
    const value = env[key];
    if (value !== undefined) out[key] = value;
  }
  return out;
}
