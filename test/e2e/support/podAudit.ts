// The mesh audit of a node's pods, the pure part: what each pod should have (intent, from the API
// objects) against what it has (rules in its netns, the node's probe sets, the redirection
// annotation, what the node's ztunnel was told), and the pods for which the two disagree. The
// collector that gathers the facts on a cluster node is test/e2e/cluster/audit.ts.

export type MeshIntent = 'sidecar' | 'ambient' | 'none';

export const SIDECAR_STATUS_ANNOTATION = 'sidecar.istio.io/status';
export const REDIRECTION_ANNOTATION = 'ambient.istio.io/redirection';
export const DATAPLANE_MODE_LABEL = 'istio.io/dataplane-mode';

export interface IntentInput {
  annotations: Readonly<Record<string, string>>;
  labels: Readonly<Record<string, string>>;
  containerNames: readonly string[];
  hostNetwork: boolean;
  namespaceLabels: Readonly<Record<string, string>>;
  /** The agent runs with ambient enabled (the chart's `profile=ambient`). */
  ambientEnabled: boolean;
}

/**
 * Sidecar: the injector's status annotation and an `istio-proxy` container. Ambient (the chart's
 * default enablement selectors): ambient enabled, not host-network, not a sidecar pod, the pod
 * labelled `istio.io/dataplane-mode=ambient`, or its namespace so and the pod not labelled `none`.
 */
export function meshIntent(pod: IntentInput): MeshIntent {
  if (pod.hostNetwork) return 'none';
  if (Object.hasOwn(pod.annotations, SIDECAR_STATUS_ANNOTATION) && pod.containerNames.includes('istio-proxy')) return 'sidecar';
  if (!pod.ambientEnabled || Object.hasOwn(pod.annotations, SIDECAR_STATUS_ANNOTATION)) return 'none';
  const mode = pod.labels[DATAPLANE_MODE_LABEL];
  if (mode === 'ambient') return 'ambient';
  if (mode !== 'none' && pod.namespaceLabels[DATAPLANE_MODE_LABEL] === 'ambient') return 'ambient';
  return 'none';
}

export interface InPodRules {
  /** The sidecar capture chain: iptables `ISTIO_REDIRECT`/`ISTIO_INBOUND`, or nft table `istio-proxy-nat`. */
  sidecar: boolean;
  /** Ambient in-pod redirection: iptables `ISTIO_PRERT`, or nft table `istio-ambient-nat`. */
  ambient: boolean;
}

/** Which capture a pod netns carries, from `iptables-save` (nft and legacy) and `nft list ruleset` output. */
export function inPodRules(dump: string): InPodRules {
  return {
    sidecar: /^:ISTIO_(REDIRECT|INBOUND) /m.test(dump) || /^table \w+ istio-proxy-nat \{/m.test(dump),
    ambient: /^:ISTIO_PRERT /m.test(dump) || /^table \w+ istio-ambient-nat \{/m.test(dump),
  };
}

/** A pod's in-pod rules per address family. */
export interface FamilyRules {
  v4: InPodRules;
  v6: InPodRules;
}

/** The rule dumps of one pod netns: `iptables-save` and `ip6tables-save` of both backends, and `nft list ruleset`. */
export interface RuleDumps {
  iptables: string;
  ip6tables: string;
  nft: string;
}

/**
 * Which capture a pod netns carries for each family: iptables rules count for IPv4, ip6tables
 * rules for IPv6, an nft table for the families it filters (`inet` both, `ip` IPv4, `ip6` IPv6).
 */
export function inPodRulesByFamily(dumps: RuleDumps): FamilyRules {
  const nftTables = (families: readonly string[]) =>
    [...dumps.nft.matchAll(/^table (\w+) (\S+) \{/gm)]
      .filter(([, family]) => families.includes(family ?? ''))
      .map(([line]) => line)
      .join('\n');
  return {
    v4: inPodRules(`${dumps.iptables}\n${nftTables(['ip', 'inet'])}`),
    v6: inPodRules(`${dumps.ip6tables}\n${nftTables(['ip6', 'inet'])}`),
  };
}

/** The families a pod's addresses are of (IPv4 when it has none). */
export function familiesOf(ips: readonly string[]): (keyof FamilyRules)[] {
  const families = new Set(ips.map((ip) => (ip.includes(':') ? 'v6' : 'v4') as keyof FamilyRules));
  return families.size === 0 ? ['v4'] : (['v4', 'v6'] as const).filter((f) => families.has(f));
}

const PROBE_SET = /^istio-inpod-probes-v[46]$/;

/**
 * The addresses in the host probe sets `istio-inpod-probes-v4`/`-v6`, from the node netns'
 * `ipset save` (its `add <set> <ip> ...` lines) and `nft list ruleset` (the sets' `elements`).
 */
export function probeSetAddresses(ipsetSave: string, nftRuleset: string): Set<string> {
  const found = new Set<string>();
  for (const line of ipsetSave.split('\n')) {
    const [verb, set, ip] = line.trim().split(/\s+/);
    if (verb === 'add' && set !== undefined && PROBE_SET.test(set) && ip !== undefined) found.add(ip);
  }
  // nft prints `set istio-inpod-probes-v4 { ... elements = { 10.0.0.1 comment "uid", ... } }`.
  for (const [, elements] of nftRuleset.matchAll(/\bset istio-inpod-probes-v[46] \{[^}]*?elements = \{([^}]*)\}/g)) {
    for (const element of (elements ?? '').split(',')) {
      const ip = element.trim().split(/\s+/)[0];
      if (ip !== undefined && ip !== '') found.add(ip);
    }
  }
  return found;
}

export interface AuditRow {
  namespace: string;
  name: string;
  uid: string;
  intent: MeshIntent;
  ips: readonly string[];
  /** Per family, for a ready sandbox with a reachable netns; undefined when none. */
  rules: FamilyRules | undefined;
  /** `ambient.istio.io/redirection: enabled` on the pod. */
  annotated: boolean;
  /** Each of the pod's IPs is in the node's probe sets. */
  inProbeSet: boolean;
  /** Some of its IPs are. */
  anyInProbeSet: boolean;
  /** The node's ztunnel holds the pod (last snapshot + Adds − Dels); undefined when no ztunnel runs on the node. */
  ztunnelKnows: boolean | undefined;
}

export interface AuditFailure {
  pod: string;
  problems: string[];
}

/**
 * The pods that break the bar: one that should be captured and is not (in any family it has an
 * address of: a dual-stack pod captured on IPv4 only bypasses the mesh over IPv6), one that looks
 * meshed (the redirection annotation) without its rules or without ztunnel holding it, and one
 * with rules it should not have.
 */
export function auditFailures(rows: readonly AuditRow[]): AuditFailure[] {
  const failures: AuditFailure[] = [];
  for (const row of rows) {
    const problems: string[] = [];
    const rules = row.rules;
    if (rules === undefined) {
      problems.push('no ready sandbox (netns not found)');
    } else {
      const families = familiesOf(row.ips);
      // A dual-stack pod's problem names its family; a single-family pod's needs no name.
      const of = (f: keyof FamilyRules) => (families.length > 1 ? ` for IPv${f.slice(1)}` : '');
      const any = { sidecar: rules.v4.sidecar || rules.v6.sidecar, ambient: rules.v4.ambient || rules.v6.ambient };
      for (const f of families) {
        if (row.intent === 'sidecar' && !rules[f].sidecar) problems.push(`sidecar pod without its capture chain${of(f)}`);
        if (row.intent === 'ambient' && !rules[f].ambient) problems.push(`ambient pod without in-pod rules${of(f)}`);
        if (row.annotated && !rules[f].ambient) problems.push(`redirection annotation without in-pod rules${of(f)}`);
      }
      if (row.intent !== 'sidecar' && any.sidecar) problems.push(`sidecar capture chain on a pod meant to be ${row.intent}`);
      if (row.intent !== 'ambient' && any.ambient) problems.push(`ambient in-pod rules on a pod meant to be ${row.intent}`);
    }
    if (row.intent === 'ambient') {
      if (!row.annotated) problems.push('ambient pod without the redirection annotation');
      if (!row.inProbeSet) problems.push('ambient pod missing from the host probe set');
      if (row.ztunnelKnows === false) problems.push('ambient pod unknown to ztunnel');
    } else {
      if (row.annotated) problems.push(`redirection annotation on a pod meant to be ${row.intent}`);
      if (row.anyInProbeSet) problems.push(`in the host probe set, meant to be ${row.intent}`);
      if (row.ztunnelKnows === true) problems.push(`known to ztunnel, meant to be ${row.intent}`);
    }
    if (problems.length > 0) failures.push({ pod: `${row.namespace}/${row.name}`, problems });
  }
  return failures;
}

/** One line per pod: intent against each fact, the failures last. */
export function auditTable(rows: readonly AuditRow[]): string {
  const yes = (b: boolean | undefined) => (b === undefined ? '-' : b ? 'yes' : 'no');
  const header = ['pod', 'intent', 'sidecar-rules v4/v6', 'ambient-rules v4/v6', 'annotation', 'probe-set', 'ztunnel'];
  const perFamily = (r: AuditRow, kind: keyof InPodRules) => `${yes(r.rules?.v4[kind])}/${yes(r.rules?.v6[kind])}`;
  const lines = rows.map((r) => [
    `${r.namespace}/${r.name}`,
    r.intent,
    perFamily(r, 'sidecar'),
    perFamily(r, 'ambient'),
    yes(r.annotated),
    yes(r.inProbeSet),
    yes(r.ztunnelKnows),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const format = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  const failures = auditFailures(rows);
  return [
    format(header),
    ...lines.map(format),
    ...(failures.length === 0 ? ['audit clean'] : failures.map((f) => `FAIL ${f.pod}: ${f.problems.join('; ')}`)),
  ].join('\n');
}
