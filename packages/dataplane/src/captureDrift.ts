import type { IptablesFamily } from './detectIptablesBackend.ts';
import { isIstioChain, type IptablesState, ownedRules } from './iptablesState.ts';

/**
 * What continuous verification can find wrong with a pod. The rule kinds come from comparing a
 * pod's netns with its plan (this module); the enrolment kinds from the ambient checks.
 */
export type DriftKind =
  | 'rules_missing'
  | 'rules_changed'
  | 'unexpected_rules'
  | 'probe_set'
  | 'ztunnel'
  | 'annotation'
  /** An ambient pod that should be enrolled (or says it is) whose netns this agent does not hold. */
  | 'not_enrolled'
  /**
   * The netns held (ambient) or saved at ADD (sidecar) for a pod is no longer the one its processes run
   * in, under the same UID: its sandbox was re-created without an ADD reaching the agent.
   */
  | 'netns_replaced'
  /** The node's host probe rules (ambient) differ from the plan: a flush or reload removed them. */
  | 'host_rules';

export interface Drift {
  kind: DriftKind;
  /** What differed, for the log line and `doctor` (bounded: a few differences, then a count). */
  detail: string;
}

/** Owned rules per family; a family absent from the map was not read (e.g. no IPv6 plan). */
export type IptablesCaptureState = Partial<Record<IptablesFamily, IptablesState>>;

const maxListed = 4;

function summarise(lines: readonly string[]): string {
  const shown = lines.slice(0, maxListed).join('; ');
  return lines.length > maxListed ? `${shown}; and ${lines.length - maxListed} more` : shown;
}

/** Multiset difference `a - b`, order of `a` kept. */
function minus(a: readonly string[], b: readonly string[]): string[] {
  const left = new Map<string, number>();
  for (const x of b) left.set(x, (left.get(x) ?? 0) + 1);
  const out: string[] = [];
  for (const x of a) {
    const n = left.get(x) ?? 0;
    if (n > 0) left.set(x, n - 1);
    else out.push(x);
  }
  return out;
}

interface LineDiff {
  missing: string[];
  extra: string[];
  /** Same lines, different order (iptables evaluates rules in order, so that is a change). */
  reordered: boolean;
}

function diffLines(want: readonly string[], have: readonly string[]): LineDiff {
  const missing = minus(want, have);
  const extra = minus(have, want);
  // With nothing extra, `have` must be `want` minus the missing lines, in the same order.
  const kept = minus(want, missing);
  const reordered = extra.length === 0 && kept.some((line, i) => have[i] !== line);
  return { missing, extra, reordered };
}

/** Pieces that differ, each tagged missing (only absent lines) or changed (anything else). */
interface Finding {
  missing: boolean;
  text: string;
}

function classify(findings: readonly Finding[]): Drift[] {
  if (findings.length === 0) return [];
  const missing = findings.every((f) => f.missing);
  return [{ kind: missing ? 'rules_missing' : 'rules_changed', detail: summarise(findings.map((f) => f.text)) }];
}

function iptablesFindings(family: IptablesFamily, expected: IptablesState, found: IptablesState): Finding[] {
  const findings: Finding[] = [];
  const tables = [...new Set([...expected.keys(), ...found.keys()])].sort();
  for (const table of tables) {
    const want = expected.get(table) ?? new Map<string, string[]>();
    const have = found.get(table) ?? new Map<string, string[]>();
    for (const chain of new Set([...want.keys(), ...have.keys()])) {
      const where = `${family} ${table} ${chain}`;
      const wantRules = want.get(chain);
      const haveRules = have.get(chain);
      if (isIstioChain(chain) && haveRules === undefined) {
        findings.push({ missing: true, text: `${where}: chain missing` });
        continue;
      }
      if (isIstioChain(chain) && wantRules === undefined) {
        findings.push({ missing: false, text: `${where}: unexpected chain` });
        continue;
      }
      const planned = new Set(wantRules ?? []);
      const d = diffLines(ownedRules(chain, wantRules ?? [], planned), ownedRules(chain, haveRules ?? [], planned));
      for (const r of d.missing) findings.push({ missing: true, text: `${where}: missing ${JSON.stringify(r)}` });
      for (const r of d.extra) findings.push({ missing: false, text: `${where}: unexpected ${JSON.stringify(r)}` });
      if (d.reordered) findings.push({ missing: false, text: `${where}: rules out of order` });
    }
  }
  return findings;
}

/** Whether a state holds anything this agent owns: an ISTIO_* chain or a jump into one. */
export function hasIstioIptablesState(state: IptablesState): boolean {
  for (const table of state.values()) {
    for (const [chain, rules] of table) {
      if (isIstioChain(chain) || ownedRules(chain, rules, new Set()).length > 0) return true;
    }
  }
  return false;
}

/**
 * Plan vs found for iptables (legacy and nft flavours alike: both print `iptables-save` text).
 * `expected` is the kernel-canonical plan per family, `undefined` for a pod outside the mesh (whose
 * netns must hold nothing of ours). Only owned state is compared, so foreign rules never count.
 * Everything absent → `rules_missing` (a flush); anything extra, different or reordered → `rules_changed`.
 */
export function compareIptablesCapture(expected: IptablesCaptureState | undefined, found: IptablesCaptureState): Drift[] {
  const families: IptablesFamily[] = ['ipv4', 'ipv6'];
  if (expected === undefined) {
    const dirty = families.filter((f) => {
      const s = found[f];
      return s !== undefined && hasIstioIptablesState(s);
    });
    return dirty.length === 0 ? [] : [{ kind: 'unexpected_rules', detail: `ISTIO_* iptables state in ${dirty.join(', ')}` }];
  }
  const findings: Finding[] = [];
  for (const family of families) {
    const want = expected[family];
    if (want === undefined) continue;
    findings.push(...iptablesFindings(family, want, found[family] ?? new Map()));
  }
  return classify(findings);
}

/** nft tables this agent owns, `family name` → `nft -s list table` output. */
export type NftCaptureState = ReadonlyMap<string, string>;

function listingLines(listing: string): string[] {
  return listing
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

/**
 * Plan vs found for native nftables (`expected`: the plan's tables as listed from a scratch netns;
 * `undefined` for a pod outside the mesh). Lines of a listing are compared as iptables rules are.
 */
export function compareNftCapture(expected: NftCaptureState | undefined, found: NftCaptureState): Drift[] {
  if (expected === undefined) {
    return found.size === 0 ? [] : [{ kind: 'unexpected_rules', detail: `istio nft tables ${[...found.keys()].join(', ')}` }];
  }
  const findings: Finding[] = [];
  for (const [table, want] of expected) {
    const have = found.get(table);
    if (have === undefined) {
      findings.push({ missing: true, text: `table ${table} missing` });
      continue;
    }
    const d = diffLines(listingLines(want), listingLines(have));
    for (const l of d.missing) findings.push({ missing: true, text: `table ${table}: missing ${JSON.stringify(l)}` });
    for (const l of d.extra) findings.push({ missing: false, text: `table ${table}: unexpected ${JSON.stringify(l)}` });
    if (d.reordered) findings.push({ missing: false, text: `table ${table}: lines out of order` });
  }
  for (const table of found.keys()) if (!expected.has(table)) findings.push({ missing: false, text: `unexpected table ${table}` });
  return classify(findings);
}

/** What an ambient pod's enrolment should be, and what the node holds for it. */
export interface AmbientEnrolmentState {
  /** The pod's IPs (expected) / the IPs the host probe set holds for the pod's UID (found). */
  probeSetIps: readonly string[];
  /** `ambient.istio.io/redirection` value, `undefined` when absent. */
  annotation: string | undefined;
  /** The connected ztunnel acked the pod (`undefined`: no ztunnel connected, nothing to compare). */
  ztunnelHasPod: boolean | undefined;
}

/**
 * The enrolment part of an ambient pod (in-pod rules are compared with `compareIptablesCapture`
 * / `compareNftCapture`). `enrolled` false is a pod outside the mesh: it must carry no annotation.
 */
export function compareAmbientEnrolment(enrolled: boolean, found: AmbientEnrolmentState, expectedIps: readonly string[]): Drift[] {
  if (!enrolled) {
    return found.annotation === undefined
      ? []
      : [{ kind: 'annotation', detail: `redirection annotation is ${JSON.stringify(found.annotation)} on a pod outside the mesh` }];
  }
  const drifts: Drift[] = [];
  const missingIps = minus(expectedIps, found.probeSetIps);
  if (missingIps.length > 0) drifts.push({ kind: 'probe_set', detail: `probe set lacks ${missingIps.join(', ')}` });
  if (found.ztunnelHasPod === false) drifts.push({ kind: 'ztunnel', detail: 'the connected ztunnel has not acked the pod' });
  if (found.annotation !== 'enabled') {
    const was = found.annotation === undefined ? 'absent' : JSON.stringify(found.annotation);
    drifts.push({ kind: 'annotation', detail: `redirection annotation is ${was}, expected "enabled"` });
  }
  return drifts;
}
