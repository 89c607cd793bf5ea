import { ANNOTATION } from './annotationNames.ts';
import type { Namespace, Pod } from './podTypes.ts';

export interface LabelSelectorRequirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}

/** A Kubernetes LabelSelector. Omitted or empty selects everything. */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export interface EnablementSelector {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
}

/** The chart's default `ambient.enablementSelectors` (upstream). */
export const DEFAULT_ENABLEMENT_SELECTORS: readonly EnablementSelector[] = [
  { podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } },
  {
    podSelector: { matchExpressions: [{ key: 'istio.io/dataplane-mode', operator: 'NotIn', values: ['none'] }] },
    namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } },
  },
];

const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseLabelSelector(v: unknown, where: string): LabelSelector {
  if (v === undefined || v === null) return {};
  if (!isRecord(v)) throw new Error(`${where} must be an object`);
  const out: LabelSelector = {};
  if (v.matchLabels !== undefined && v.matchLabels !== null) {
    if (!isRecord(v.matchLabels) || !Object.values(v.matchLabels).every((x) => typeof x === 'string')) {
      throw new Error(`${where}.matchLabels must map strings to strings`);
    }
    out.matchLabels = v.matchLabels as Record<string, string>;
  }
  if (v.matchExpressions !== undefined && v.matchExpressions !== null) {
    if (!Array.isArray(v.matchExpressions)) throw new Error(`${where}.matchExpressions must be a list`);
    out.matchExpressions = v.matchExpressions.map((e: unknown, i) => {
      const at = `${where}.matchExpressions[${i}]`;
      if (!isRecord(e) || typeof e.key !== 'string' || typeof e.operator !== 'string') {
        throw new Error(`${at} needs a string key and operator`);
      }
      if (!OPERATORS.has(e.operator))
        throw new Error(`${at}.operator ${JSON.stringify(e.operator)} is not In, NotIn, Exists or DoesNotExist`);
      const values = e.values ?? [];
      if (!Array.isArray(values) || !values.every((x) => typeof x === 'string')) throw new Error(`${at}.values must be strings`);
      if ((e.operator === 'In' || e.operator === 'NotIn') && values.length === 0) {
        throw new Error(`${at}: operator ${e.operator} needs values`);
      }
      if ((e.operator === 'Exists' || e.operator === 'DoesNotExist') && values.length > 0) {
        throw new Error(`${at}: operator ${e.operator} takes no values`);
      }
      return { key: e.key, operator: e.operator as LabelSelectorRequirement['operator'], values: values as string[] };
    });
  }
  return out;
}

/** Validates decoded selector data (from `AMBIENT_ENABLEMENT_SELECTOR` YAML or the netconf). */
export function parseEnablementSelectors(v: unknown): EnablementSelector[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new Error('enablement selectors must be a list');
  return v.map((entry: unknown, i) => {
    if (!isRecord(entry)) throw new Error(`enablement selector ${i} must be an object`);
    return {
      podSelector: parseLabelSelector(entry.podSelector, `[${i}].podSelector`),
      namespaceSelector: parseLabelSelector(entry.namespaceSelector, `[${i}].namespaceSelector`),
    };
  });
}

export function labelSelectorMatches(selector: LabelSelector | undefined, labels: Readonly<Record<string, string>>): boolean {
  if (!selector) return true;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const value = labels[e.key];
    switch (e.operator) {
      case 'In':
        if (!has || !(e.values ?? []).includes(value as string)) return false;
        break;
      case 'NotIn':
        if (has && (e.values ?? []).includes(value as string)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
    }
  }
  return true;
}

function isEmptySelector(s: LabelSelector | undefined): boolean {
  return !s || (Object.keys(s.matchLabels ?? {}).length === 0 && (s.matchExpressions ?? []).length === 0);
}

/**
 * Whether a pod is enrolled in ambient mode (upstream `CompiledEnablementSelectors.Matches`): never host-network or
 * sidecar-injected pods; otherwise any selector whose pod and namespace parts both match.
 * An empty selector list matches nothing.
 */
export function ambientEnabledFor(pod: Pod, namespace: Namespace | undefined, selectors: readonly EnablementSelector[]): boolean {
  if (pod.spec?.hostNetwork) return false;
  if (Object.hasOwn(pod.metadata.annotations ?? {}, ANNOTATION.status)) return false;
  const podLabels = pod.metadata.labels ?? {};
  const nsLabels = namespace?.metadata.labels ?? {};
  return selectors.some((s) => labelSelectorMatches(s.podSelector, podLabels) && labelSelectorMatches(s.namespaceSelector, nsLabels));
}

/** For namespace events: some selector with a non-empty namespace part matches (upstream `MatchesNamespace`). */
export function namespaceSelectedForAmbient(namespace: Namespace, selectors: readonly EnablementSelector[]): boolean {
  const labels = namespace.metadata.labels ?? {};
  return selectors.some((s) => !isEmptySelector(s.namespaceSelector) && labelSelectorMatches(s.namespaceSelector, labels));
}
