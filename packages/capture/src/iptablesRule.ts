/** One iptables rule as data: `-A <chain> <args>` or, with `position`, `-I <chain> <position> <args>`. */
export interface IptablesRule {
  readonly table: IptablesTable;
  readonly chain: string;
  readonly args: readonly string[];
  readonly position?: number;
}

export type IptablesTable = 'filter' | 'mangle' | 'nat' | 'raw';

/** Per-family rule lists in creation order; `v6` is empty when IPv6 is off. */
export interface IptablesRuleSet {
  readonly v4: readonly IptablesRule[];
  readonly v6: readonly IptablesRule[];
}

/** Chains iptables provides (never declared with `-N`). */
export const BUILTIN_CHAINS: ReadonlySet<string> = new Set([
  'INPUT',
  'OUTPUT',
  'FORWARD',
  'PREROUTING',
  'POSTROUTING',
  'ACCEPT',
  'RETURN',
  'DROP',
]);

export const CHAIN = {
  inbound: 'ISTIO_INBOUND',
  redirect: 'ISTIO_REDIRECT',
  inRedirect: 'ISTIO_IN_REDIRECT',
  output: 'ISTIO_OUTPUT',
  outputDns: 'ISTIO_OUTPUT_DNS',
  divert: 'ISTIO_DIVERT',
  tproxy: 'ISTIO_TPROXY',
  drop: 'ISTIO_DROP',
} as const;
