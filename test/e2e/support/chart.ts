import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubeClient } from './kubeClient.ts';
import { REPO_ROOT, rigBinary, rigKubernetesVersion } from './rigPaths.ts';
import { runCommand } from './runCommand.ts';

export const CHART_DIR = join(REPO_ROOT, 'manifests/charts/istio-cni');
/** The default rendering, for `kubectl apply`; `make manifests` rewrites it. */
export const DEFAULT_MANIFEST = join(REPO_ROOT, 'manifests/istio-cni.yaml');
export const RELEASE_NAME = 'istio-cni';
export const RELEASE_NAMESPACE = 'istio-system';

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; [key: string]: unknown };
  [key: string]: unknown;
}

/**
 * `helm template` of the chart with the rig's helm; `set` entries are `key=value` for `--set`,
 * `values` are values files (`-f`), `kubeVersion` the cluster version the templates see: by default
 * the rig's (`helm install` against its API server sees that one; `helm template` alone would see
 * helm's built-in default: v1.20.0 for the rig's `go install`ed helm; release builds set it from
 * the client-go they are built with).
 */
export async function renderChart(
  options: { set?: readonly string[]; values?: readonly string[]; kubeVersion?: string; namespace?: string } = {},
): Promise<string> {
  const argv = [rigBinary('helm'), 'template', RELEASE_NAME, CHART_DIR, '--namespace', options.namespace ?? RELEASE_NAMESPACE];
  for (const f of options.values ?? []) argv.push('-f', f);
  for (const s of options.set ?? []) argv.push('--set', s);
  argv.push('--kube-version', options.kubeVersion ?? rigKubernetesVersion());
  // helm wants somewhere to keep its (unused) repository config; keep it out of $HOME.
  const home = mkdtempSync(join(tmpdir(), 'istio-cni-e2e-helm-'));
  const env = {
    ...process.env,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
  };
  try {
    return (await runCommand(argv, { env })).stdout;
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

/** The objects of a multi-document manifest, empty documents dropped. */
export function parseManifest(text: string): KubeObject[] {
  const objects: KubeObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`manifest does not parse: ${doc.errors[0]?.message}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    const obj = value as KubeObject;
    if (typeof obj.kind !== 'string' || typeof obj.apiVersion !== 'string' || typeof obj.metadata?.name !== 'string') {
      throw new Error(`manifest document is not a Kubernetes object: ${JSON.stringify(value).slice(0, 200)}`);
    }
    objects.push(obj);
  }
  return objects;
}

const CLUSTER_SCOPED = new Set([
  'Namespace',
  'Node',
  'ClusterRole',
  'ClusterRoleBinding',
  'PriorityClass',
  'CustomResourceDefinition',
  'ValidatingAdmissionPolicy',
  'ValidatingAdmissionPolicyBinding',
]);

/** The collection URL of an object: `/api/v1/namespaces/x/configmaps`, `/apis/rbac.authorization.k8s.io/v1/clusterroles`. */
export function collectionPath(obj: KubeObject, defaultNamespace: string = RELEASE_NAMESPACE): string {
  const group = obj.apiVersion.includes('/') ? `/apis/${obj.apiVersion}` : `/api/${obj.apiVersion}`;
  const lower = obj.kind.toLowerCase();
  const plural = lower.endsWith('y') ? `${lower.slice(0, -1)}ies` : lower.endsWith('s') ? `${lower}es` : `${lower}s`;
  if (CLUSTER_SCOPED.has(obj.kind)) return `${group}/${plural}`;
  return `${group}/namespaces/${obj.metadata.namespace ?? defaultNamespace}/${plural}`;
}

/**
 * Creates every object (replacing any with the same name), the way `kubectl apply` would on a fresh
 * cluster; returns the API server's warnings, each prefixed with the object it was about.
 */
export async function applyObjects(api: KubeClient, objects: readonly KubeObject[]): Promise<string[]> {
  const warnings: string[] = [];
  for (const obj of objects) {
    const collection = collectionPath(obj);
    let res = await api.request('POST', collection, obj);
    if (res.status === 409) {
      res = await api.request('PUT', `${collection}/${obj.metadata.name}`, obj);
    }
    if (res.status !== 200 && res.status !== 201) {
      throw new Error(`creating ${obj.kind} ${obj.metadata.name} answered ${res.status}: ${res.text}`);
    }
    warnings.push(...res.warnings.map((w) => `${obj.kind} ${obj.metadata.name}: ${w}`));
  }
  return warnings;
}

export function findObject(objects: readonly KubeObject[], kind: string, name: string): KubeObject {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (found === undefined) throw new Error(`the rendering has no ${kind} ${name}`);
  return found;
}
