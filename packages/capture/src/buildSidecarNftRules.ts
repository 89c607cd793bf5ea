import type { CaptureConfig } from './captureConfig.ts';
import { DNS_PROXY_PORT, OUTBOUND_MARK } from './captureConfig.ts';
import type { Cidr } from '@istio-cni/cni';
import type { NftRule, NftTable } from './nftRule.ts';

const NAT: NftTable = 'istio-proxy-nat';
const MANGLE: NftTable = 'istio-proxy-mangle';
const RAW: NftTable = 'istio-proxy-raw';

const C = {
  prerouting: 'prerouting',
  output: 'output',
  inbound: 'istio-inbound',
  redirect: 'istio-redirect',
  inRedirect: 'istio-in-redirect',
  output_: 'istio-output',
  outputDns: 'istio-output-dns',
  divert: 'istio-divert',
  tproxy: 'istio-tproxy',
  drop: 'istio-drop',
} as const;

/** Collects rules; every rule gets a `counter` right before its action fragments. */
class NftRules {
  readonly rules: NftRule[] = [];
  readonly #ipv6: boolean;

  constructor(ipv6: boolean) {
    this.#ipv6 = ipv6;
  }

  add(table: NftTable, chain: string, match: readonly string[], action: readonly string[]): void {
    this.rules.push({ table, chain, args: [...match, 'counter', ...action] });
  }

  addV6(table: NftTable, chain: string, match: readonly string[], action: readonly string[]): void {
    if (this.#ipv6) this.add(table, chain, match, action);
  }

  insert(table: NftTable, chain: string, index: number, match: readonly string[], action: readonly string[]): void {
    this.rules.push({ table, chain, args: [...match, 'counter', ...action], index });
  }

  insertV6(table: NftTable, chain: string, index: number, match: readonly string[], action: readonly string[]): void {
    if (this.#ipv6) this.insert(table, chain, index, match, action);
  }
}

const str = String;

/**
 * The istio-nftables sidecar rule program (upstream `tools/istio-nftables`), in upstream creation order:
 * `tools/istio-nftables/pkg/capture/run.go` `Run`. One `inet` list; IPv6 rules only when enabled.
 */
export function buildSidecarNftRules(cfg: CaptureConfig): NftRule[] {
  const r = new NftRules(cfg.enableIPv6);
  const tproxy = cfg.inboundInterceptionMode === 'TPROXY';
  const lo4 = cfg.hostIPv4LoopbackCidr.text;
  const all = (ranges: readonly Cidr[] | '*'): readonly Cidr[] => (ranges === '*' ? [] : ranges);
  const excludeV4 = all(cfg.outboundIPRangesExclude).filter((c) => c.family === 4);
  const excludeV6 = all(cfg.outboundIPRangesExclude).filter((c) => c.family === 6);
  const includeV4 = all(cfg.outboundIPRangesInclude).filter((c) => c.family === 4);
  const includeV6 = all(cfg.outboundIPRangesInclude).filter((c) => c.family === 6);
  const loopbackIncluded = [...includeV4, ...includeV6].some((c) => c.isLoopback);
  const redirectDns = cfg.redirectDns && (cfg.captureAllDns || cfg.dnsServersV4.length > 0 || cfg.dnsServersV6.length > 0);
  const tunnel = str(cfg.inboundTunnelPort);
  const mark = str(cfg.inboundTProxyMark);
  const tcp = 'meta l4proto tcp';

  for (const nic of cfg.excludeInterfaces) {
    r.add(NAT, C.prerouting, ['iifname', nic], ['return']);
    r.add(NAT, C.output, ['oifname', nic], ['return']);
  }
  if (tproxy) {
    for (const nic of cfg.excludeInterfaces) {
      r.add(MANGLE, C.prerouting, ['iifname', nic], ['return']);
      r.add(MANGLE, C.output, ['oifname', nic], ['return']);
    }
  }
  for (const nic of cfg.rerouteVirtualInterfaces) r.insert(NAT, C.prerouting, 0, ['iifname', nic], ['return']);
  if (cfg.dropInvalid) {
    r.add(MANGLE, C.prerouting, [tcp, 'ct state', 'invalid'], ['jump', C.drop]);
    r.add(MANGLE, C.drop, [], ['drop']);
  }
  r.add(NAT, C.inbound, [tcp, 'tcp dport', tunnel], ['return']);
  r.add(NAT, C.redirect, [tcp], ['redirect to', `:${cfg.proxyPort}`]);
  r.add(NAT, C.inRedirect, [tcp], ['redirect to', `:${cfg.inboundCapturePort}`]);

  addInbound(r, cfg, lo4);

  r.add(NAT, C.output, [], ['jump', C.output_]);
  for (const port of cfg.outboundPortsExclude) {
    r.add(NAT, C.output_, ['tcp dport', str(port)], ['return']);
    r.add(NAT, C.output_, ['udp dport', str(port)], ['return']);
  }
  r.add(NAT, C.output_, ['oifname', 'lo', 'ip saddr', '127.0.0.6/32'], ['return']);
  r.addV6(NAT, C.output_, ['oifname', 'lo', 'ip6 saddr', '::6/128'], ['return']);

  for (const [owner, ids] of [
    ['skuid', cfg.proxyUid],
    ['skgid', cfg.proxyGid],
  ] as const) {
    for (const id of ids) {
      const ports = redirectDns && owner === 'skuid' ? `{ 53, ${tunnel} }` : tunnel;
      r.add(
        NAT,
        C.output_,
        ['oifname', 'lo', tcp, 'ip daddr', '!=', lo4, 'tcp dport', '!=', ports, owner, str(id)],
        ['jump', C.inRedirect],
      );
      r.addV6(
        NAT,
        C.output_,
        ['oifname', 'lo', tcp, 'ip6 daddr', '!=', '::1/128', 'tcp dport', '!=', ports, owner, str(id)],
        ['jump', C.inRedirect],
      );
      // An explicitly included loopback range must reach the redirect rules.
      if (!loopbackIncluded) {
        const match = redirectDns
          ? ['oifname', 'lo', tcp, 'tcp dport', '!=', '53', owner, '!=', str(id)]
          : ['oifname', 'lo', owner, '!=', str(id)];
        r.add(NAT, C.output_, match, ['return']);
      }
      r.add(NAT, C.output_, [owner, str(id)], ['return']);
    }
  }

  if (cfg.ownerGroupsInclude === '*') {
    for (const group of cfg.ownerGroupsExclude) r.add(NAT, C.output_, ['skgid', group], ['return']);
  } else {
    r.add(
      NAT,
      C.output_,
      cfg.ownerGroupsInclude.flatMap((g) => ['skgid', '!=', g]),
      ['return'],
    );
  }

  if (redirectDns) addDnsRedirect(r, cfg);

  r.add(NAT, C.output_, ['ip daddr', lo4], ['return']);
  r.addV6(NAT, C.output_, ['ip6 daddr', '::1/128'], ['return']);
  for (const c of excludeV4) r.add(NAT, C.output_, ['ip daddr', c.text], ['return']);
  for (const c of excludeV6) r.addV6(NAT, C.output_, ['ip6 daddr', c.text], ['return']);
  for (const port of cfg.outboundPortsInclude) r.add(NAT, C.output_, ['tcp dport', str(port)], ['jump', C.redirect]);

  if (cfg.outboundIPRangesInclude === '*') {
    r.add(NAT, C.output_, [], ['jump', C.redirect]);
    for (const nic of cfg.rerouteVirtualInterfaces) r.insert(NAT, C.prerouting, 0, ['iifname', nic], ['jump', C.redirect]);
  } else {
    for (const c of includeV4) {
      for (const nic of cfg.rerouteVirtualInterfaces) {
        r.insert(NAT, C.prerouting, 0, ['iifname', nic, 'ip daddr', c.text], ['jump', C.redirect]);
      }
      r.add(NAT, C.output_, ['ip daddr', c.text], ['jump', C.redirect]);
    }
    for (const c of includeV6) {
      for (const nic of cfg.rerouteVirtualInterfaces) {
        r.insertV6(NAT, C.prerouting, 0, ['iifname', nic, 'ip6 daddr', c.text], ['jump', C.redirect]);
      }
      r.addV6(NAT, C.output_, ['ip6 daddr', c.text], ['jump', C.redirect]);
    }
  }

  if (tproxy) {
    const outMark = str(OUTBOUND_MARK);
    r.add(MANGLE, C.prerouting, [tcp, 'mark', mark], ['ct mark set mark']);
    r.add(MANGLE, C.output, ['oifname', 'lo', tcp, 'mark', mark], ['return']);
    for (const [owner, ids] of [
      ['skuid', cfg.proxyUid],
      ['skgid', cfg.proxyGid],
    ] as const) {
      for (const id of ids) {
        r.add(MANGLE, C.output, ['oifname', 'lo', tcp, 'ip daddr', '!=', lo4, owner, str(id)], ['meta mark set', outMark]);
        r.addV6(MANGLE, C.output, ['oifname', 'lo', tcp, 'ip6 daddr', '!=', '::1/128', owner, str(id)], ['meta mark set', outMark]);
      }
    }
    r.add(MANGLE, C.output, [tcp, 'ct mark', mark], ['meta mark set ct mark']);
    r.insert(MANGLE, C.inbound, 0, [tcp, 'mark', mark], ['return']);
    r.insert(MANGLE, C.inbound, 1, ['iifname', 'lo', tcp, 'ip saddr', '127.0.0.6/32'], ['return']);
    r.insertV6(MANGLE, C.inbound, 1, ['iifname', 'lo', tcp, 'ip6 saddr', '::6/128'], ['return']);
    r.insert(MANGLE, C.inbound, 2, ['iifname', 'lo', tcp, 'mark', '!=', outMark], ['return']);
  }
  return r.rules;
}

function addInbound(r: NftRules, cfg: CaptureConfig, lo4: string): void {
  const include = cfg.inboundPortsInclude;
  if (include !== '*' && include.length === 0) return;
  const tproxy = cfg.inboundInterceptionMode === 'TPROXY';
  const table = tproxy ? MANGLE : NAT;
  const mark = str(cfg.inboundTProxyMark);
  const tcp = 'meta l4proto tcp';
  const capture = `:${cfg.inboundCapturePort}`;
  if (tproxy) {
    r.add(MANGLE, C.divert, [], ['meta mark set', mark]);
    r.add(MANGLE, C.divert, [], ['accept']);
    r.add(MANGLE, C.tproxy, [tcp, 'ip daddr', '!=', lo4, 'tproxy ip to', capture, 'meta mark set', mark], ['accept']);
    r.addV6(MANGLE, C.tproxy, [tcp, 'ip6 daddr', '!=', '::1/128', 'tproxy ip6 to', capture, 'meta mark set', mark], ['accept']);
  }
  r.add(table, C.prerouting, [tcp], ['jump', C.inbound]);
  if (include === '*') {
    for (const port of cfg.inboundPortsExclude) r.add(table, C.inbound, [tcp, 'tcp dport', str(port)], ['return']);
    if (tproxy) {
      r.add(MANGLE, C.inbound, [tcp, 'ct state', 'related,established'], ['jump', C.divert]);
      r.add(MANGLE, C.inbound, [tcp], ['jump', C.tproxy]);
    } else {
      r.add(NAT, C.inbound, [tcp], ['jump', C.inRedirect]);
    }
    return;
  }
  for (const port of include) {
    if (tproxy) {
      r.add(MANGLE, C.inbound, [tcp, 'ct state', 'related,established', 'tcp dport', str(port)], ['jump', C.divert]);
      r.add(MANGLE, C.inbound, [tcp, 'tcp dport', str(port)], ['jump', C.tproxy]);
    } else {
      r.add(NAT, C.inbound, [tcp, 'tcp dport', str(port)], ['jump', C.inRedirect]);
    }
  }
}

function addDnsRedirect(r: NftRules, cfg: CaptureConfig): void {
  const to = `:${DNS_PROXY_PORT}`;
  const all = cfg.captureAllDns;
  const v4 = cfg.dnsServersV4.map((s) => `${s.text}/32`);
  const v6 = cfg.dnsServersV6.map((s) => `${s.text}/128`);
  r.add(RAW, C.output, [], ['jump', C.outputDns]);
  if (all || v4.length > 0 || v6.length > 0) r.add(NAT, C.output_, [], ['jump', C.outputDns]);
  for (const proto of ['tcp', 'udp'] as const) {
    if (all) {
      r.add(NAT, C.outputDns, proto === 'tcp' ? ['meta l4proto tcp', 'tcp dport', '53'] : ['udp dport', '53'], ['redirect', 'to', to]);
      continue;
    }
    for (const s of v4) r.add(NAT, C.outputDns, ['ip daddr', s, `${proto} dport`, '53'], ['redirect', 'to', to]);
    for (const s of v6) r.addV6(NAT, C.outputDns, ['ip6 daddr', s, `${proto} dport`, '53'], ['redirect', 'to', to]);
  }
  for (const [owner, ids] of [
    ['skuid', cfg.proxyUid],
    ['skgid', cfg.proxyGid],
  ] as const) {
    for (const id of ids) {
      r.add(RAW, C.outputDns, ['udp dport', '53', 'meta', owner, str(id)], ['ct', 'zone', 'set', '1']);
      r.add(RAW, C.outputDns, ['udp sport', str(DNS_PROXY_PORT), 'meta', owner, str(id)], ['ct', 'zone', 'set', '2']);
    }
  }
  if (all) {
    r.add(RAW, C.prerouting, [], ['jump', C.inbound]);
    r.add(RAW, C.outputDns, ['udp dport', '53'], ['ct', 'zone', 'set', '2']);
    r.add(RAW, C.inbound, ['udp sport', '53'], ['ct', 'zone', 'set', '1']);
    return;
  }
  if (v4.length > 0 || v6.length > 0) r.add(RAW, C.prerouting, [], ['jump', C.inbound]);
  for (const s of v4) {
    r.add(RAW, C.outputDns, ['udp dport', '53', 'ip daddr', s], ['ct', 'zone', 'set', '2']);
    r.add(RAW, C.inbound, ['udp sport', '53', 'ip saddr', s], ['ct', 'zone', 'set', '1']);
  }
  for (const s of v6) {
    r.addV6(RAW, C.outputDns, ['udp dport', '53', 'ip6 daddr', s], ['ct', 'zone', 'set', '2']);
    r.addV6(RAW, C.inbound, ['udp sport', '53', 'ip6 saddr', s], ['ct', 'zone', 'set', '1']);
  }
}
