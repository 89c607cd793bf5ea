import { KubeApiError, daemonSetPath, type KubeClient } from '@istio-cni/kube';
import type { DaemonSetLookup, DaemonSetState } from '../installer/upgradeSafety.ts';

export const DAEMONSET_NAME = 'istio-cni-node';
/** Per lookup, so the retried check fits the chart's 30 s termination grace period. */
const LOOKUP_DEADLINE_MS = 5_000;

interface NodeSelectorRequirement {
  key: string;
  operator: string;
  values?: string[];
}

/** The fields of an apps/v1 DaemonSet read here. */
interface DaemonSet {
  metadata?: { deletionTimestamp?: string | null };
  spec?: {
    template?: {
      spec?: {
        affinity?: {
          nodeAffinity?: {
            requiredDuringSchedulingIgnoredDuringExecution?: { nodeSelectorTerms?: { matchExpressions?: NodeSelectorRequirement[] }[] };
          };
        };
      };
    };
  };
}

function requirementMatches(req: NodeSelectorRequirement, labels: Record<string, string>): boolean {
  const has = Object.hasOwn(labels, req.key);
  const value = labels[req.key];
  const values = req.values ?? [];
  switch (req.operator) {
    case 'In':
      return has && values.includes(value as string);
    case 'NotIn':
      return !has || !values.includes(value as string);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
    case 'Gt':
    case 'Lt': {
      if (!has || values.length !== 1) return false;
      const a = Number(value);
      const b = Number(values[0]);
      return req.operator === 'Gt' ? a > b : a < b;
    }
    default:
      return false;
  }
}

/**
 * The DaemonSet that runs this daemon (upstream `ShouldStopCleanup`): present and not deleting, and whether its
 * required node affinity still admits this node (a relabelled node means "not an upgrade").
 * RBAC grants `get` on this one name only.
 */
export function createDaemonSetLookup(
  client: KubeClient,
  namespace: string,
  nodeLabels: () => Promise<Record<string, string>>,
): DaemonSetLookup {
  return {
    async lookup(): Promise<DaemonSetState> {
      let ds: DaemonSet;
      try {
        ds = await client.request<DaemonSet>({
          method: 'GET',
          path: daemonSetPath(namespace, DAEMONSET_NAME),
          deadlineMs: LOOKUP_DEADLINE_MS,
        });
      } catch (err) {
        const c = err instanceof KubeApiError ? err.code : undefined;
        if (c === 404) return { kind: 'not-found' };
        if (c === 401 || c === 403) return { kind: 'unauthorized' };
        throw err;
      }
      const deleting = ds.metadata?.deletionTimestamp !== undefined && ds.metadata?.deletionTimestamp !== null;
      const terms =
        ds.spec?.template?.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
      let targetsThisNode = true;
      if (terms.length > 0) {
        const labels = await nodeLabels();
        targetsThisNode = terms.some((t) => (t.matchExpressions ?? []).every((r) => requirementMatches(r, labels)));
      }
      return { kind: 'present', deleting, targetsThisNode };
    },
  };
}
