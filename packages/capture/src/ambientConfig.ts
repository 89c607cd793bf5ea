import { parseIpAddress, quoteForError } from '@istio-cni/cni';
import type { IpAddress, IpFamily } from '@istio-cni/cni';

/** Fixed in-pod redirection constants (upstream `cni/pkg/iptables`); the marks must match ztunnel's in-pod config. */
export const AMBIENT = {
  /** ztunnel marks its own traffic with this (1337). */
  inpodMark: 0x539,
  inpodMask: 0xfff,
  /** Connmark for traffic ztunnel accepted; routed via table 100. */
  inpodTproxyMark: 0x111,
  inpodTproxyMask: 0xfff,
  inpodRestoreMask: 0xffffffff,
  routeTableInbound: 100,
  ipRulePriority: 32764,
  ztunnelOutboundPort: 15001,
  ztunnelInboundPlaintextPort: 15006,
  ztunnelInboundPort: 15008,
  dnsCapturePort: 15053,
  probeSetPrefix: 'istio-inpod-probes',
} as const;

/** iptables chains owned by ambient (upstream `cni/pkg/iptables/iptables.go`). */
export const AMBIENT_CHAIN = {
  prerouting: 'ISTIO_PRERT',
  output: 'ISTIO_OUTPUT',
  hostPostrouting: 'ISTIO_POSTRT',
} as const;

export const DEFAULT_HOST_PROBE_SNAT_IP = '169.254.7.127';
export const DEFAULT_HOST_PROBE_SNAT_IPV6 = 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff';

/** The probe set (ipset or nft set) name for one family. */
export function ambientProbeSetName(family: IpFamily): string {
  return `${AMBIENT.probeSetPrefix}-v${family}`;
}

/** Node-wide ambient redirection settings; one object serves the host and every pod. */
export interface AmbientConfig {
  /** `AMBIENT_IPV6`: also program IPv6 rules, routes and the `-v6` probe set. */
  readonly enableIPv6: boolean;
  /** `AMBIENT_DNS_CAPTURE`: the global DNS capture default a pod may override. */
  readonly redirectDns: boolean;
  /** `AMBIENT_RECONCILE_POD_RULES_ON_STARTUP`. */
  readonly reconcile: boolean;
  /** Source address kubelet probes are SNATed to (`HOST_PROBE_SNAT_IP`). */
  readonly hostProbeSnatAddress: IpAddress;
  /** `HOST_PROBE_SNAT_IPV6`. */
  readonly hostProbeV6SnatAddress: IpAddress;
}

/** Already-read settings; the agent reads the environment, this package never does. */
export interface AmbientOptions {
  readonly enableIPv6?: boolean;
  readonly redirectDns?: boolean;
  readonly reconcile?: boolean;
  /** Raw `HOST_PROBE_SNAT_IP` value; default `169.254.7.127`. */
  readonly hostProbeSnatIp?: string;
  /** Raw `HOST_PROBE_SNAT_IPV6` value; default `fd16:9254:7127:1337:ffff:ffff:ffff:ffff`. */
  readonly hostProbeSnatIpv6?: string;
}

/** A setting that cannot be used; names the setting and the value. */
export class AmbientConfigError extends Error {
  readonly code = 'ERR_INVALID_AMBIENT_CONFIG';
  readonly setting: string;
  readonly value: string;

  constructor(setting: string, value: string, reason: string) {
    super(`invalid ${setting}=${quoteForError(value)}: ${reason}`);
    this.name = 'AmbientConfigError';
    this.setting = setting;
    this.value = value;
  }
}

function parseSnatAddress(setting: string, value: string, family: IpFamily): IpAddress {
  let ip: IpAddress;
  try {
    ip = parseIpAddress(value);
  } catch (err) {
    throw new AmbientConfigError(setting, value, (err as Error).message);
  }
  if (ip.family !== family) throw new AmbientConfigError(setting, value, `must be an IPv${family} address`);
  return ip;
}

/** Validates the options into an `AmbientConfig`; throws `AmbientConfigError` on a bad address. */
export function ambientConfigFromOptions(options: AmbientOptions = {}): AmbientConfig {
  return {
    enableIPv6: options.enableIPv6 ?? false,
    redirectDns: options.redirectDns ?? false,
    reconcile: options.reconcile ?? false,
    hostProbeSnatAddress: parseSnatAddress('HOST_PROBE_SNAT_IP', options.hostProbeSnatIp ?? DEFAULT_HOST_PROBE_SNAT_IP, 4),
    hostProbeV6SnatAddress: parseSnatAddress('HOST_PROBE_SNAT_IPV6', options.hostProbeSnatIpv6 ?? DEFAULT_HOST_PROBE_SNAT_IPV6, 6),
  };
}

/** `0x539/0xfff` style mark/mask text. */
export function markMask(mark: number, mask: number): string {
  return `0x${mark.toString(16)}/0x${mask.toString(16)}`;
}

export function hex(n: number): string {
  return `0x${n.toString(16)}`;
}
