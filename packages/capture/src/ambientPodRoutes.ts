import { AMBIENT, hex } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import type { IpFamily } from '@istio-cni/cni';

/** `ip rule add fwmark 0x111/0xfff pref 32764 lookup 100` for one family. */
export interface AmbientMarkIpRule {
  readonly family: IpFamily;
  readonly fwmark: number;
  readonly mask: number;
  readonly priority: number;
  readonly table: number;
}

/** `ip route replace local <dst> dev lo table 100` (scope host) for one family. */
export interface AmbientLoopbackRoute {
  readonly family: IpFamily;
  readonly destination: '0.0.0.0/0' | '::/0';
  readonly type: 'local';
  readonly device: 'lo';
  readonly table: number;
}

/** The netlink side of in-pod redirection: marked packets are delivered locally to ztunnel. */
export interface AmbientPodRoutes {
  readonly ipRules: readonly AmbientMarkIpRule[];
  readonly routes: readonly AmbientLoopbackRoute[];
}

export interface AmbientPodRoutesOptions {
  /** `/proc/sys/net/ipv6/conf/lo/disable_ipv6` inside the pod reads `1`. */
  readonly loopbackIpv6Disabled?: boolean;
}

/**
 * The ip rules and loopback routes in-pod redirection needs (upstream `cni/pkg/iptables/iptables.go`), installed
 * before the iptables/nft rules and removed after them. The IPv6 rule follows `AMBIENT_IPV6`; the
 * IPv6 route is also skipped when the pod's loopback has IPv6 disabled.
 */
export function ambientPodRoutes(config: AmbientConfig, options: AmbientPodRoutesOptions = {}): AmbientPodRoutes {
  const families: IpFamily[] = config.enableIPv6 ? [4, 6] : [4];
  const rule = (family: IpFamily): AmbientMarkIpRule => ({
    family,
    fwmark: AMBIENT.inpodTproxyMark,
    mask: AMBIENT.inpodTproxyMask,
    priority: AMBIENT.ipRulePriority,
    table: AMBIENT.routeTableInbound,
  });
  const route = (family: IpFamily): AmbientLoopbackRoute => ({
    family,
    destination: family === 4 ? '0.0.0.0/0' : '::/0',
    type: 'local',
    device: 'lo',
    table: AMBIENT.routeTableInbound,
  });
  const routeFamilies = families.filter((f) => f === 4 || options.loopbackIpv6Disabled !== true);
  return { ipRules: families.map(rule), routes: routeFamilies.map(route) };
}

/** `ip` argv (iproute2) adding or deleting a mark rule; `add` reports EEXIST, which callers ignore. */
export function ipRuleArgs(rule: AmbientMarkIpRule, action: 'add' | 'del'): string[] {
  return [
    'ip',
    `-${rule.family}`,
    'rule',
    action,
    'fwmark',
    `${hex(rule.fwmark)}/${hex(rule.mask)}`,
    'pref',
    String(rule.priority),
    'lookup',
    String(rule.table),
  ];
}

/** `ip` argv replacing (idempotent add) or deleting a loopback route. */
export function ipRouteArgs(route: AmbientLoopbackRoute, action: 'replace' | 'del'): string[] {
  return ['ip', `-${route.family}`, 'route', action, route.type, route.destination, 'dev', route.device, 'table', String(route.table)];
}
