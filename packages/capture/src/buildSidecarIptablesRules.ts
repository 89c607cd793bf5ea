import type { CaptureConfig } from './captureConfig.ts';
import { DNS_PROXY_PORT, OUTBOUND_MARK } from './captureConfig.ts';
import type { Cidr } from '@istio-cni/cni';
import { CHAIN } from './iptablesRule.ts';
import type { IptablesRule, IptablesRuleSet, IptablesTable } from './iptablesRule.ts';

const V6_LOOPBACK = '::1/128';
const V4_PASSTHROUGH = '127.0.0.6/32';
const V6_PASSTHROUGH = '::6/128';

/** Collects rules per family; "both" rules go to v6 only when IPv6 is enabled. */
class FamilyRules {
  readonly v4: IptablesRule[] = [];
  readonly v6: IptablesRule[] = [];
  readonly #ipv6: boolean;

  constructor(ipv6: boolean) {
    this.#ipv6 = ipv6;
  }

  v4Rule(table: IptablesTable, chain: string, args: string[], position?: number): void {
    this.v4.push(position === undefined ? { table, chain, args } : { table, chain, args, position });
  }

  v6Rule(table: IptablesTable, chain: string, args: string[], position?: number): void {
    if (!this.#ipv6) return;
    this.v6.push(position === undefined ? { table, chain, args } : { table, chain, args, position });
  }

  both(table: IptablesTable, chain: string, ...args: string[]): void {
    this.v4Rule(table, chain, args);
    this.v6Rule(table, chain, args);
  }

  insertBoth(table: IptablesTable, chain: string, position: number, ...args: string[]): void {
    this.v4Rule(table, chain, args, position);
    this.v6Rule(table, chain, args, position);
  }

  /** A rule that differs only in one address slot per family. */
  versioned(table: IptablesTable, chain: string, v4: string, v6: string, args: (addr: string) => string[]): void {
    this.v4Rule(table, chain, args(v4));
    this.v6Rule(table, chain, args(v6));
  }
}

interface Ranges {
  readonly wildcard: boolean;
  readonly v4: readonly Cidr[];
  readonly v6: readonly Cidr[];
}

function splitRanges(ranges: readonly Cidr[] | '*'): Ranges {
  if (ranges === '*') return { wildcard: true, v4: [], v6: [] };
  return { wildcard: false, v4: ranges.filter((c) => c.family === 4), v6: ranges.filter((c) => c.family === 6) };
}

const str = String;

/**
 * The istio-iptables sidecar rule program (upstream `tools/istio-iptables/pkg/capture/run.go`), in upstream creation order:
 * `tools/istio-iptables/pkg/capture/run.go` `Run`.
 */
export function buildSidecarIptablesRules(cfg: CaptureConfig): IptablesRuleSet {
  const r = new FamilyRules(cfg.enableIPv6);
  const tproxy = cfg.inboundInterceptionMode === 'TPROXY';
  const lo4 = cfg.hostIPv4LoopbackCidr.text;
  const exclude = splitRanges(cfg.outboundIPRangesExclude);
  const include = splitRanges(cfg.outboundIPRangesInclude);
  const loopbackIncluded = [...include.v4, ...include.v6].some((c) => c.isLoopback);
  // Redirect-DNS without capture-all needs servers; with none it is silently off (upstream warns).
  const redirectDns = cfg.redirectDns && (cfg.captureAllDns || cfg.dnsServersV4.length > 0 || cfg.dnsServersV6.length > 0);
  const tunnel = str(cfg.inboundTunnelPort);
  const mark = str(cfg.inboundTProxyMark);

  for (const nic of cfg.excludeInterfaces) {
    r.both('nat', 'PREROUTING', '-i', nic, '-j', 'RETURN');
    r.both('nat', 'OUTPUT', '-o', nic, '-j', 'RETURN');
  }
  if (tproxy) {
    for (const nic of cfg.excludeInterfaces) {
      r.both('mangle', 'PREROUTING', '-i', nic, '-j', 'RETURN');
      r.both('mangle', 'OUTPUT', '-o', nic, '-j', 'RETURN');
    }
  }
  for (const nic of cfg.rerouteVirtualInterfaces) {
    r.insertBoth('nat', 'PREROUTING', 1, '-i', nic, '-j', 'RETURN');
  }
  if (cfg.dropInvalid) {
    r.both('mangle', 'PREROUTING', '-m', 'conntrack', '--ctstate', 'INVALID', '-j', CHAIN.drop);
    r.both('mangle', CHAIN.drop, '-j', 'DROP');
  }
  r.both('nat', CHAIN.inbound, '-p', 'tcp', '--dport', tunnel, '-j', 'RETURN');
  r.both('nat', CHAIN.redirect, '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', str(cfg.proxyPort));
  r.both('nat', CHAIN.inRedirect, '-p', 'tcp', '-j', 'REDIRECT', '--to-ports', str(cfg.inboundCapturePort));

  addInbound(r, cfg, lo4);

  r.both('nat', 'OUTPUT', '-j', CHAIN.output);
  for (const port of cfg.outboundPortsExclude) {
    r.both('nat', CHAIN.output, '-p', 'tcp', '--dport', str(port), '-j', 'RETURN');
    r.both('nat', CHAIN.output, '-p', 'udp', '--dport', str(port), '-j', 'RETURN');
  }
  r.versioned('nat', CHAIN.output, V4_PASSTHROUGH, V6_PASSTHROUGH, (a) => ['-o', 'lo', '-s', a, '-j', 'RETURN']);

  for (const id of cfg.proxyUid) {
    const uid = str(id);
    const ports = redirectDns ? ['-m', 'multiport', '!', '--dports', `53,${tunnel}`] : ['!', '--dport', tunnel];
    r.versioned('nat', CHAIN.output, lo4, V6_LOOPBACK, (a) => [
      '-o',
      'lo',
      '!',
      '-d',
      a,
      '-p',
      'tcp',
      ...ports,
      '-m',
      'owner',
      '--uid-owner',
      uid,
      '-j',
      CHAIN.inRedirect,
    ]);
    addNotOwnedReturn(r, loopbackIncluded, redirectDns, '--uid-owner', uid);
    r.both('nat', CHAIN.output, '-m', 'owner', '--uid-owner', uid, '-j', 'RETURN');
  }
  for (const id of cfg.proxyGid) {
    const gid = str(id);
    r.versioned('nat', CHAIN.output, lo4, V6_LOOPBACK, (a) => [
      '-o',
      'lo',
      '!',
      '-d',
      a,
      '-p',
      'tcp',
      '!',
      '--dport',
      tunnel,
      '-m',
      'owner',
      '--gid-owner',
      gid,
      '-j',
      CHAIN.inRedirect,
    ]);
    addNotOwnedReturn(r, loopbackIncluded, redirectDns, '--gid-owner', gid);
    r.both('nat', CHAIN.output, '-m', 'owner', '--gid-owner', gid, '-j', 'RETURN');
  }

  if (cfg.ownerGroupsInclude === '*') {
    for (const group of cfg.ownerGroupsExclude) {
      r.both('nat', CHAIN.output, '-m', 'owner', '--gid-owner', group, '-j', 'RETURN');
    }
  } else {
    const noneOf = cfg.ownerGroupsInclude.flatMap((g) => ['-m', 'owner', '!', '--gid-owner', g]);
    r.both('nat', CHAIN.output, ...noneOf, '-j', 'RETURN');
  }

  if (redirectDns) addDnsRedirect(r, cfg);

  r.versioned('nat', CHAIN.output, lo4, V6_LOOPBACK, (a) => ['-d', a, '-j', 'RETURN']);
  for (const c of exclude.v4) r.v4Rule('nat', CHAIN.output, ['-d', c.text, '-j', 'RETURN']);
  for (const c of exclude.v6) r.v6Rule('nat', CHAIN.output, ['-d', c.text, '-j', 'RETURN']);
  for (const port of cfg.outboundPortsInclude) {
    r.both('nat', CHAIN.output, '-p', 'tcp', '--dport', str(port), '-j', CHAIN.redirect);
  }
  addOutboundInclude(include, include.v4, cfg.rerouteVirtualInterfaces, (chain, args, pos) => r.v4Rule('nat', chain, args, pos));
  addOutboundInclude(include, include.v6, cfg.rerouteVirtualInterfaces, (chain, args, pos) => r.v6Rule('nat', chain, args, pos));

  if (tproxy) {
    r.both('mangle', 'PREROUTING', '-p', 'tcp', '-m', 'mark', '--mark', mark, '-j', 'CONNMARK', '--save-mark');
    r.both('mangle', 'OUTPUT', '-p', 'tcp', '-o', 'lo', '-m', 'mark', '--mark', mark, '-j', 'RETURN');
    for (const [flag, ids] of [
      ['--uid-owner', cfg.proxyUid],
      ['--gid-owner', cfg.proxyGid],
    ] as const) {
      for (const id of ids) {
        r.versioned('mangle', 'OUTPUT', lo4, V6_LOOPBACK, (a) => [
          '!',
          '-d',
          a,
          '-p',
          'tcp',
          '-o',
          'lo',
          '-m',
          'owner',
          flag,
          str(id),
          '-j',
          'MARK',
          '--set-mark',
          str(OUTBOUND_MARK),
        ]);
      }
    }
    r.both('mangle', 'OUTPUT', '-p', 'tcp', '-m', 'connmark', '--mark', mark, '-j', 'CONNMARK', '--restore-mark');
    r.insertBoth('mangle', CHAIN.inbound, 1, '-p', 'tcp', '-m', 'mark', '--mark', mark, '-j', 'RETURN');
    r.v4Rule('mangle', CHAIN.inbound, ['-p', 'tcp', '-s', V4_PASSTHROUGH, '-i', 'lo', '-j', 'RETURN'], 2);
    r.v6Rule('mangle', CHAIN.inbound, ['-p', 'tcp', '-s', V6_PASSTHROUGH, '-i', 'lo', '-j', 'RETURN'], 2);
    r.insertBoth('mangle', CHAIN.inbound, 3, '-p', 'tcp', '-i', 'lo', '-m', 'mark', '!', '--mark', str(OUTBOUND_MARK), '-j', 'RETURN');
  }
  return { v4: r.v4, v6: r.v6 };
}

function addInbound(r: FamilyRules, cfg: CaptureConfig, lo4: string): void {
  const include = cfg.inboundPortsInclude;
  if (include !== '*' && include.length === 0) return;
  const tproxy = cfg.inboundInterceptionMode === 'TPROXY';
  const table: IptablesTable = tproxy ? 'mangle' : 'nat';
  const mark = str(cfg.inboundTProxyMark);
  if (tproxy) {
    r.both('mangle', CHAIN.divert, '-j', 'MARK', '--set-mark', mark);
    r.both('mangle', CHAIN.divert, '-j', 'ACCEPT');
    r.versioned('mangle', CHAIN.tproxy, lo4, V6_LOOPBACK, (a) => [
      '!',
      '-d',
      a,
      '-p',
      'tcp',
      '-j',
      'TPROXY',
      '--tproxy-mark',
      `${mark}/0xffffffff`,
      '--on-port',
      str(cfg.inboundCapturePort),
    ]);
  }
  r.both(table, 'PREROUTING', '-p', 'tcp', '-j', CHAIN.inbound);
  if (include === '*') {
    for (const port of cfg.inboundPortsExclude) {
      r.both(table, CHAIN.inbound, '-p', 'tcp', '--dport', str(port), '-j', 'RETURN');
    }
    if (tproxy) {
      r.both('mangle', CHAIN.inbound, '-p', 'tcp', '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', CHAIN.divert);
      r.both('mangle', CHAIN.inbound, '-p', 'tcp', '-j', CHAIN.tproxy);
    } else {
      r.both('nat', CHAIN.inbound, '-p', 'tcp', '-j', CHAIN.inRedirect);
    }
    return;
  }
  for (const port of include) {
    if (tproxy) {
      r.both(
        'mangle',
        CHAIN.inbound,
        '-p',
        'tcp',
        '--dport',
        str(port),
        '-m',
        'conntrack',
        '--ctstate',
        'RELATED,ESTABLISHED',
        '-j',
        CHAIN.divert,
      );
      r.both('mangle', CHAIN.inbound, '-p', 'tcp', '--dport', str(port), '-j', CHAIN.tproxy);
    } else {
      r.both('nat', CHAIN.inbound, '-p', 'tcp', '--dport', str(port), '-j', CHAIN.inRedirect);
    }
  }
}

function addNotOwnedReturn(r: FamilyRules, loopbackIncluded: boolean, redirectDns: boolean, flag: string, id: string): void {
  // An explicitly included loopback range must reach the redirect rules.
  if (loopbackIncluded) return;
  if (redirectDns) {
    r.both('nat', CHAIN.output, '-o', 'lo', '-p', 'tcp', '!', '--dport', '53', '-m', 'owner', '!', flag, id, '-j', 'RETURN');
  } else {
    r.both('nat', CHAIN.output, '-o', 'lo', '-m', 'owner', '!', flag, id, '-j', 'RETURN');
  }
}

function addOutboundInclude(
  ranges: Ranges,
  cidrs: readonly Cidr[],
  ifaces: readonly string[],
  add: (chain: string, args: string[], position?: number) => void,
): void {
  if (ranges.wildcard) {
    add(CHAIN.output, ['-j', CHAIN.redirect]);
    for (const nic of ifaces) add('PREROUTING', ['-i', nic, '-j', CHAIN.redirect], 1);
    return;
  }
  for (const c of cidrs) {
    for (const nic of ifaces) add('PREROUTING', ['-i', nic, '-d', c.text, '-j', CHAIN.redirect], 1);
    add(CHAIN.output, ['-d', c.text, '-j', CHAIN.redirect]);
  }
}

function addDnsRedirect(r: FamilyRules, cfg: CaptureConfig): void {
  const dnsPort = str(DNS_PROXY_PORT);
  const v4 = cfg.dnsServersV4.map((s) => `${s.text}/32`);
  const v6 = cfg.dnsServersV6.map((s) => `${s.text}/128`);
  const all = cfg.captureAllDns;
  r.both('raw', 'OUTPUT', '-j', CHAIN.outputDns);
  if (all || v4.length > 0) r.v4Rule('nat', CHAIN.output, ['-j', CHAIN.outputDns]);
  if (all || v6.length > 0) r.v6Rule('nat', CHAIN.output, ['-j', CHAIN.outputDns]);
  for (const [proto, toFlag] of [
    ['tcp', '--to-ports'],
    ['udp', '--to-port'],
  ] as const) {
    if (all) {
      r.both('nat', CHAIN.outputDns, '-p', proto, '--dport', '53', '-j', 'REDIRECT', toFlag, dnsPort);
      continue;
    }
    for (const s of v4) r.v4Rule('nat', CHAIN.outputDns, ['-p', proto, '--dport', '53', '-d', s, '-j', 'REDIRECT', toFlag, dnsPort]);
    for (const s of v6) r.v6Rule('nat', CHAIN.outputDns, ['-p', proto, '--dport', '53', '-d', s, '-j', 'REDIRECT', toFlag, dnsPort]);
  }
  for (const [flag, ids] of [
    ['--uid-owner', cfg.proxyUid],
    ['--gid-owner', cfg.proxyGid],
  ] as const) {
    for (const id of ids) {
      r.both('raw', CHAIN.outputDns, '-p', 'udp', '--dport', '53', '-m', 'owner', flag, str(id), '-j', 'CT', '--zone', '1');
      r.both('raw', CHAIN.outputDns, '-p', 'udp', '--sport', dnsPort, '-m', 'owner', flag, str(id), '-j', 'CT', '--zone', '2');
    }
  }
  if (all) {
    r.both('raw', 'PREROUTING', '-j', CHAIN.inbound);
    r.both('raw', CHAIN.outputDns, '-p', 'udp', '--dport', '53', '-j', 'CT', '--zone', '2');
    r.both('raw', CHAIN.inbound, '-p', 'udp', '--sport', '53', '-j', 'CT', '--zone', '1');
    return;
  }
  if (v4.length > 0) r.v4Rule('raw', 'PREROUTING', ['-j', CHAIN.inbound]);
  for (const s of v4) {
    r.v4Rule('raw', CHAIN.outputDns, ['-p', 'udp', '--dport', '53', '-d', s, '-j', 'CT', '--zone', '2']);
    r.v4Rule('raw', CHAIN.inbound, ['-p', 'udp', '--sport', '53', '-s', s, '-j', 'CT', '--zone', '1']);
  }
  if (v6.length > 0) r.v6Rule('raw', 'PREROUTING', ['-j', CHAIN.inbound]);
  for (const s of v6) {
    r.v6Rule('raw', CHAIN.outputDns, ['-p', 'udp', '--dport', '53', '-d', s, '-j', 'CT', '--zone', '2']);
    r.v6Rule('raw', CHAIN.inbound, ['-p', 'udp', '--sport', '53', '-s', s, '-j', 'CT', '--zone', '1']);
  }
}
