import { DEFAULT_CAPTURE_CONFIG } from '@istio-cni/capture';
import type { CaptureConfig, Wildcard } from '@istio-cni/capture';
import type { Cidr } from '@istio-cni/cni';
import type { LogThreshold } from '@istio-cni/handoff';
import { FLAG_SPECS, flagLabel, type FlagSpec } from './flagSpecs.ts';
import * as parse from './parseFlagValues.ts';
import { UsageError } from './usageError.ts';

/** A flag value given on the command line: a string, or `true` for a bare boolean flag. */
export interface GivenFlag {
  readonly value: string | true;
  /** How it was spelled (`--netns`, `-n`), for messages. */
  readonly spelling: string;
}

export type Environment = Readonly<Record<string, string | undefined>>;

/** Rule settings from flags; the pod netns decides IPv6 and resolv.conf the DNS servers. */
export type FlagCaptureConfig = Omit<CaptureConfig, 'enableIPv6' | 'dnsServersV4' | 'dnsServersV6'>;

/** Process-level settings upstream reads only from the environment (`FillConfigFromEnvironment`). */
export interface EnvCaptureSettings {
  readonly ownerGroupsInclude: readonly string[] | Wildcard;
  readonly ownerGroupsExclude: readonly string[];
  readonly hostIPv4LoopbackCidr: Cidr;
}

export interface IstioIptablesSettings {
  /** `--pod FILE`: the manifest supplies every rule-shaping setting. */
  readonly podFile?: string;
  /** Rule settings from flags; absent with `--pod`. */
  readonly capture?: FlagCaptureConfig;
  readonly envCapture: EnvCaptureSettings;
  readonly netns?: string;
  readonly dryRun: boolean;
  readonly skipRuleApply: boolean;
  readonly reconcile: boolean;
  readonly nativeNftables: boolean;
  readonly forceIptablesBinary?: 'legacy' | 'nft';
  readonly logThreshold: LogThreshold;
  readonly resolvConf: string;
  /** `ENABLE_INBOUND_IPV6`: overrides the detection inside the netns. */
  readonly enableIPv6?: boolean;
  readonly probeTimeoutMs: number;
  readonly probePort: number;
  /** Accepted upstream flags that change nothing here, for a log line. */
  readonly ignored: readonly string[];
}

export interface ResolveIstioIptablesSettingsOptions {
  /** Flags given on the command line, by upstream long name. */
  readonly given: ReadonlyMap<string, GivenFlag>;
  readonly env: Environment;
  /** UID of a user name (`ENVOY_USER`), undefined when unknown. */
  readonly lookupUid: (name: string) => string | undefined;
}

const DEFAULT_PROXY_UID = '1337';

interface Raw {
  readonly text: string | true;
  readonly source: string;
}

/**
 * Turns flags and environment into validated settings. Precedence is upstream's: the command line,
 * else the last set of the flag's environment variables, else the default. Every value is parsed;
 * the first bad one throws a UsageError naming its flag or variable, before anything runs.
 */
export function resolveIstioIptablesSettings(options: ResolveIstioIptablesSettingsOptions): IstioIptablesSettings {
  const { given, env } = options;
  const specs = new Map(FLAG_SPECS.map((s) => [s.long, s]));
  const spec = (long: string): FlagSpec => {
    const s = specs.get(long);
    if (s === undefined) throw new Error(`unknown flag spec ${long}`);
    return s;
  };
  const raw = (long: string): Raw | undefined => {
    const s = spec(long);
    const cli = given.get(long);
    if (cli !== undefined)
      return { text: cli.value, source: cli.spelling === `--${s.long}` || cli.spelling === `-${s.short}` ? flagLabel(s) : cli.spelling };
    let found: Raw | undefined;
    for (const name of s.env) {
      const value = env[name];
      // Upstream ignores an environment value a boolean flag cannot parse; empty is the common case.
      if (value === undefined || (s.kind === 'bool' && value === '')) continue;
      found = { text: value, source: `env ${name}` };
    }
    return found;
  };
  const read = <T>(long: string, parser: (value: string) => T, fallback: T): T => {
    const r = raw(long);
    if (r === undefined) return fallback;
    if (r.text === true) throw new UsageError(r.source, undefined, 'needs a value');
    try {
      return parser(r.text);
    } catch (err) {
      throw new UsageError(r.source, r.text, (err as Error).message);
    }
  };
  const bool = (long: string): boolean => {
    const r = raw(long);
    if (r === undefined) return false;
    if (r.text === true) return true;
    try {
      return parse.parseBool(r.text);
    } catch (err) {
      throw new UsageError(r.source, r.text, (err as Error).message);
    }
  };
  const fromEnv = <T>(name: string, parser: (value: string) => T, fallback: T): T => {
    const value = env[name];
    if (value === undefined) return fallback;
    try {
      return parser(value);
    } catch (err) {
      throw new UsageError(`env ${name}`, value, (err as Error).message);
    }
  };

  const podFile = read<string | undefined>('pod', nonEmpty, undefined);
  if (podFile !== undefined) {
    for (const s of FLAG_SPECS) {
      const cli = given.get(s.long);
      if (s.ruleShaping && cli !== undefined) {
        throw new UsageError(cli.spelling, undefined, 'cannot be combined with --pod (the pod manifest supplies it)');
      }
    }
  }
  if (bool('run-validation')) throw new UsageError(flagLabel(spec('run-validation')), undefined, 'is not supported by this implementation');
  if (bool('cleanup-only')) throw new UsageError(flagLabel(spec('cleanup-only')), undefined, 'is not supported by this implementation');
  const nativeNftables = bool('native-nftables');
  const forced = given.get('force-iptables-binary');
  if (nativeNftables && forced !== undefined) {
    throw new UsageError(forced.spelling, undefined, 'cannot be combined with --native-nftables');
  }

  const envCapture: EnvCaptureSettings = {
    ownerGroupsInclude: fromEnv('ISTIO_OUTBOUND_OWNER_GROUPS', parse.parseGroupsOrWildcard, DEFAULT_CAPTURE_CONFIG.ownerGroupsInclude),
    ownerGroupsExclude: fromEnv('ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE', parse.parseGroups, DEFAULT_CAPTURE_CONFIG.ownerGroupsExclude),
    hostIPv4LoopbackCidr: fromEnv(
      'ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR',
      parse.parseLoopbackCidr,
      DEFAULT_CAPTURE_CONFIG.hostIPv4LoopbackCidr,
    ),
  };
  const forceIptablesBinary = nativeNftables
    ? undefined
    : read<'legacy' | 'nft' | undefined>('force-iptables-binary', parse.parseIptablesBinary, undefined);
  const enableIPv6 = fromEnv<boolean | undefined>('ENABLE_INBOUND_IPV6', parse.parseBool, undefined);
  const ignored = ['force-apply', 'cni-mode', 'log_as_json'].filter((long) => bool(long));

  return {
    ...(podFile === undefined ? { capture: flagCapture(read, bool, options) } : { podFile }),
    envCapture,
    ...optionalField('netns', read<string | undefined>('network-namespace', parseNetnsPath, undefined)),
    dryRun: bool('dry-run'),
    skipRuleApply: bool('skip-rule-apply'),
    reconcile: bool('reconcile'),
    nativeNftables,
    ...optionalField('forceIptablesBinary', forceIptablesBinary),
    logThreshold: read('log_output_level', parse.parseLogLevel, 'info'),
    resolvConf: read('resolv-conf', nonEmpty, '/etc/resolv.conf'),
    ...optionalField('enableIPv6', enableIPv6),
    probeTimeoutMs: read('probe-timeout', parse.parseDuration, 5000),
    probePort: read('iptables-probe-port', parse.parseSinglePort, 15002),
    ignored,
  };
}

type Read = <T>(long: string, parser: (value: string) => T, fallback: T) => T;

function flagCapture(read: Read, bool: (long: string) => boolean, options: ResolveIstioIptablesSettingsOptions): FlagCaptureConfig {
  // Upstream: an empty UID falls back to $ENVOY_USER's uid (default user istio-proxy), else 1337;
  // an empty GID copies the UID value.
  const uidText = read('proxy-uid', String, '');
  const proxyUidText = uidText !== '' ? uidText : (options.lookupUid(options.env.ENVOY_USER ?? 'istio-proxy') ?? DEFAULT_PROXY_UID);
  const proxyUid = uidText !== '' ? read('proxy-uid', parse.parseIds, []) : parseIdsOrDefault(proxyUidText);
  const gidText = read('proxy-gid', String, '');
  const proxyGid = gidText !== '' ? read('proxy-gid', parse.parseIds, []) : proxyUid;
  return {
    ...DEFAULT_CAPTURE_CONFIG,
    proxyPort: read('envoy-port', parse.parseSinglePort, DEFAULT_CAPTURE_CONFIG.proxyPort),
    inboundCapturePort: read('inbound-capture-port', parse.parseSinglePort, DEFAULT_CAPTURE_CONFIG.inboundCapturePort),
    inboundTunnelPort: read('inbound-tunnel-port', parse.parseSinglePort, DEFAULT_CAPTURE_CONFIG.inboundTunnelPort),
    proxyUid,
    proxyGid,
    inboundInterceptionMode: read('istio-inbound-interception-mode', parse.parseMode, DEFAULT_CAPTURE_CONFIG.inboundInterceptionMode),
    inboundTProxyMark: read('istio-inbound-tproxy-mark', parse.parseMark, DEFAULT_CAPTURE_CONFIG.inboundTProxyMark),
    inboundTProxyRouteTable: read(
      'istio-inbound-tproxy-route-table',
      parse.parseRouteTable,
      DEFAULT_CAPTURE_CONFIG.inboundTProxyRouteTable,
    ),
    inboundPortsInclude: read('istio-inbound-ports', parse.parsePortsOrWildcard, DEFAULT_CAPTURE_CONFIG.inboundPortsInclude),
    inboundPortsExclude: read('istio-local-exclude-ports', parse.parsePorts, DEFAULT_CAPTURE_CONFIG.inboundPortsExclude),
    outboundPortsInclude: read('istio-outbound-ports', parse.parsePorts, DEFAULT_CAPTURE_CONFIG.outboundPortsInclude),
    outboundPortsExclude: read('istio-local-outbound-ports-exclude', parse.parsePorts, DEFAULT_CAPTURE_CONFIG.outboundPortsExclude),
    outboundIPRangesInclude: read('istio-service-cidr', parse.parseCidrsOrWildcard, DEFAULT_CAPTURE_CONFIG.outboundIPRangesInclude),
    outboundIPRangesExclude: read('istio-service-exclude-cidr', parse.parseCidrs, DEFAULT_CAPTURE_CONFIG.outboundIPRangesExclude),
    rerouteVirtualInterfaces: read('kube-virt-interfaces', parse.parseInterfaces, DEFAULT_CAPTURE_CONFIG.rerouteVirtualInterfaces),
    excludeInterfaces: read('istio-exclude-interfaces', parse.parseInterfaces, DEFAULT_CAPTURE_CONFIG.excludeInterfaces),
    redirectDns: bool('redirect-dns'),
    captureAllDns: bool('capture-all-dns'),
    dropInvalid: bool('drop-invalid'),
    dualStack: bool('dual-stack'),
  };
}

function parseIdsOrDefault(text: string): number[] {
  try {
    return parse.parseIds(text);
  } catch {
    return [Number(DEFAULT_PROXY_UID)];
  }
}

function nonEmpty(value: string): string {
  if (value === '') throw new Error('must not be empty');
  if (value.includes('\0')) throw new Error('must not contain NUL');
  return value;
}

function parseNetnsPath(value: string): string | undefined {
  // Upstream treats an empty namespace as "the current one".
  if (value === '') return undefined;
  return nonEmpty(value);
}

function optionalField<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}
