/**
 * The flag table of `install-cni istio-iptables`: upstream istio-iptables' flags with their names,
 * shorthands and environment fallbacks (`tools/istio-iptables/pkg/cmd/root.go`, `flag.BindEnv`
 * turns `foo-bar` into `FOO_BAR`; `flag.AdditionalEnv` adds a second, later-applied name).
 */

export type FlagKind = 'string' | 'bool';

export interface FlagSpec {
  /** Long name without dashes, exactly as upstream spells it. */
  readonly long: string;
  readonly short?: string;
  /** Other long names accepted for the same setting. */
  readonly aliases?: readonly string[];
  /** Environment variables read when the flag is not given, later names win (upstream order). */
  readonly env: readonly string[];
  readonly kind: FlagKind;
  /** Placeholder shown in help for string flags. */
  readonly valueName?: string;
  readonly description: string;
  /** Shapes the rule set; a pod manifest (`--pod`) supplies these instead. */
  readonly ruleShaping: boolean;
}

function envName(long: string): string {
  return long.replaceAll('-', '_').toUpperCase();
}

function flag(long: string, options: Partial<FlagSpec> & Pick<FlagSpec, 'kind' | 'description'>): FlagSpec {
  return { long, env: [envName(long)], ruleShaping: false, ...options };
}

export const FLAG_SPECS: readonly FlagSpec[] = [
  // `envoy-port` is bound without an environment variable upstream (flag.Bind, not BindEnv).
  flag('envoy-port', {
    short: 'p',
    env: [],
    kind: 'string',
    valueName: 'port',
    ruleShaping: true,
    description: 'port to which all outbound TCP traffic is redirected (default 15001)',
  }),
  flag('inbound-capture-port', {
    short: 'z',
    kind: 'string',
    valueName: 'port',
    ruleShaping: true,
    description: 'port to which all inbound TCP traffic is redirected (default 15006)',
  }),
  flag('inbound-tunnel-port', {
    short: 'e',
    kind: 'string',
    valueName: 'port',
    ruleShaping: true,
    description: 'HBONE tunnel port, never captured inbound (default 15008)',
  }),
  flag('proxy-uid', {
    short: 'u',
    kind: 'string',
    valueName: 'uids',
    ruleShaping: true,
    description: 'comma-separated UIDs whose traffic is not redirected (default: uid of $ENVOY_USER, else 1337)',
  }),
  flag('proxy-gid', {
    short: 'g',
    kind: 'string',
    valueName: 'gids',
    ruleShaping: true,
    description: 'comma-separated GIDs whose traffic is not redirected (default: the proxy UIDs)',
  }),
  flag('istio-inbound-interception-mode', {
    short: 'm',
    kind: 'string',
    valueName: 'mode',
    ruleShaping: true,
    description: 'inbound interception mode: REDIRECT (default) or TPROXY',
  }),
  flag('istio-inbound-tproxy-mark', {
    short: 't',
    kind: 'string',
    valueName: 'mark',
    ruleShaping: true,
    description: 'TPROXY packet mark (default 1337)',
  }),
  flag('istio-inbound-tproxy-route-table', {
    short: 'r',
    kind: 'string',
    valueName: 'table',
    ruleShaping: true,
    description: 'TPROXY policy routing table (default 133)',
  }),
  flag('istio-inbound-ports', {
    short: 'b',
    kind: 'string',
    valueName: 'ports',
    ruleShaping: true,
    description: 'comma-separated inbound ports to redirect, "*" for all; empty disables inbound capture',
  }),
  flag('istio-local-exclude-ports', {
    short: 'd',
    kind: 'string',
    valueName: 'ports',
    ruleShaping: true,
    description: 'comma-separated inbound ports to exclude; only with --istio-inbound-ports "*"',
  }),
  flag('istio-exclude-interfaces', {
    short: 'c',
    kind: 'string',
    valueName: 'interfaces',
    ruleShaping: true,
    description: 'comma-separated interfaces whose traffic is never captured',
  }),
  flag('istio-service-cidr', {
    short: 'i',
    kind: 'string',
    valueName: 'cidrs',
    ruleShaping: true,
    description: 'comma-separated outbound CIDRs to redirect, "*" for all; empty disables outbound capture',
  }),
  flag('istio-service-exclude-cidr', {
    short: 'x',
    kind: 'string',
    valueName: 'cidrs',
    ruleShaping: true,
    description: 'comma-separated outbound CIDRs to exclude from redirection',
  }),
  flag('istio-outbound-ports', {
    short: 'q',
    kind: 'string',
    valueName: 'ports',
    ruleShaping: true,
    description: 'comma-separated outbound ports always redirected',
  }),
  flag('istio-local-outbound-ports-exclude', {
    short: 'o',
    kind: 'string',
    valueName: 'ports',
    ruleShaping: true,
    description: 'comma-separated outbound ports never redirected',
  }),
  flag('kube-virt-interfaces', {
    short: 'k',
    aliases: ['reroute-virtual-interfaces'],
    kind: 'string',
    valueName: 'interfaces',
    ruleShaping: true,
    description: 'comma-separated virtual interfaces whose inbound traffic is treated as outbound',
  }),
  flag('redirect-dns', {
    env: ['REDIRECT_DNS', 'ISTIO_META_DNS_CAPTURE'],
    kind: 'bool',
    ruleShaping: true,
    description: 'redirect DNS (port 53) to the istio-agent on 15053',
  }),
  flag('capture-all-dns', {
    kind: 'bool',
    ruleShaping: true,
    description: 'with --redirect-dns, capture all port-53 traffic instead of only the resolv.conf servers',
  }),
  flag('drop-invalid', {
    env: ['DROP_INVALID', 'INVALID_DROP'],
    kind: 'bool',
    ruleShaping: true,
    description: 'drop packets conntrack marks INVALID',
  }),
  flag('dual-stack', {
    env: ['DUAL_STACK', 'ISTIO_DUAL_STACK'],
    kind: 'bool',
    ruleShaping: true,
    description: 'enable IPv6 rules when the netns has any global IPv6 address',
  }),
  flag('network-namespace', {
    aliases: ['netns'],
    kind: 'string',
    valueName: 'path',
    description: 'network namespace (path) to apply the rules in (default: the current one)',
  }),
  flag('dry-run', { short: 'n', kind: 'bool', description: 'print the documents that would be applied; apply nothing' }),
  flag('skip-rule-apply', { kind: 'bool', description: 'do not apply any rule' }),
  flag('run-validation', { kind: 'bool', description: 'validate the rules by a redirected probe connection (not supported)' }),
  flag('iptables-probe-port', { kind: 'string', valueName: 'port', description: 'validation probe port (default 15002)' }),
  flag('probe-timeout', { kind: 'string', valueName: 'duration', description: 'validation timeout, Go duration (default 5s)' }),
  flag('reconcile', { kind: 'bool', description: 'replace different or leftover istio rules instead of failing' }),
  flag('cleanup-only', { kind: 'bool', description: 'remove istio rules without adding any (not supported)' }),
  flag('force-apply', { kind: 'bool', description: 'accepted for compatibility; the state check here is exact, so it has no effect' }),
  flag('cni-mode', { kind: 'bool', description: 'accepted for compatibility; a per-netns xtables lock is always used' }),
  flag('native-nftables', { kind: 'bool', description: 'program nftables (inet istio-proxy-* tables) instead of iptables' }),
  flag('force-iptables-binary', {
    aliases: ['iptables-version'],
    kind: 'string',
    valueName: 'legacy|nft',
    description: 'force iptables-legacy or iptables-nft instead of detecting the backend',
  }),
  flag('log_output_level', {
    env: [],
    kind: 'string',
    valueName: 'levels',
    description: 'log level, e.g. "info" or "default:debug" (none|error|warn|info|debug)',
  }),
  flag('log_as_json', { env: [], kind: 'bool', description: 'accepted for compatibility; logs are always JSON lines on stderr' }),
  // Ours, not upstream's.
  flag('pod', {
    env: [],
    kind: 'string',
    valueName: 'file',
    description: 'derive every rule setting from a pod manifest (YAML or JSON), as the CNI plugin does',
  }),
  flag('resolv-conf', {
    env: [],
    kind: 'string',
    valueName: 'file',
    description: 'resolv.conf whose nameservers --redirect-dns captures (default /etc/resolv.conf)',
  }),
];

/** `--long (-s)`: how messages name a flag. */
export function flagLabel(spec: FlagSpec): string {
  return spec.short === undefined ? `--${spec.long}` : `--${spec.long} (-${spec.short})`;
}
