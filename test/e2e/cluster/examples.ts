import { mkdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { CLUSTER_DIR } from './layout.ts';

/** The annotation istiod's injector writes on a sidecar pod (CNI mode: `istio-validation`, not `istio-init`). */
export const SIDECAR_STATUS = JSON.stringify({
  initContainers: ['istio-validation'],
  containers: ['istio-proxy'],
  volumes: ['istio-envoy', 'istio-data', 'istio-podinfo', 'istio-token', 'istiod-ca-cert'],
  imagePullSecrets: null,
  revision: 'default',
});

export interface Example {
  command: string;
  look: string;
}

/**
 * Two manifests for the workload image: a sidecar-style pod whose "proxy" answers on 15001 (so a
 * captured outbound connection says so), and a namespace labelled for ambient with one pod.
 */
export function writeExamples(workloadImage: string): Example[] {
  const dir = join(CLUSTER_DIR, 'examples');
  mkdirSync(dir, { recursive: true });
  const container = (name: string, command: string[], user?: number) => ({
    name,
    image: workloadImage,
    imagePullPolicy: 'Never',
    command,
    ...(user === undefined ? {} : { securityContext: { runAsUser: user, runAsGroup: user } }),
  });
  const sidecarPod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'sidecar-demo', namespace: 'default', annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
    spec: {
      terminationGracePeriodSeconds: 1,
      containers: [
        container('app', ['sleep', '86400']),
        // The proxy's uid (1337) is exempt from capture; it answers whatever was redirected to it.
        container('istio-proxy', ['nc', '-ll', '-p', '15001', '-e', 'echo', 'captured by istio-proxy:15001'], 1337),
      ],
    },
  };
  const ambient = {
    apiVersion: 'v1',
    kind: 'List',
    items: [
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ambient-demo', labels: { 'istio.io/dataplane-mode': 'ambient' } } },
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'ambient-demo', namespace: 'ambient-demo' },
        spec: { terminationGracePeriodSeconds: 1, containers: [container('app', ['sleep', '86400'])] },
      },
    ],
  };
  const sidecarFile = join(dir, 'sidecar-demo.json');
  const ambientFile = join(dir, 'ambient-demo.json');
  writeFileSync(sidecarFile, `${JSON.stringify(sidecarPod, null, 2)}\n`);
  writeFileSync(ambientFile, `${JSON.stringify(ambient, null, 2)}\n`);
  const rel = (p: string) => relative(REPO_ROOT, p);
  return [
    {
      command: `kubectl apply -f ${rel(sidecarFile)} && kubectl wait --for=condition=Ready pod/sidecar-demo && kubectl exec sidecar-demo -c app -- nc -w 2 192.0.2.123 80`,
      look: 'prints "captured by istio-proxy:15001": the outbound connection was redirected into the pod\'s proxy port; the agent logs the pod (kubectl -n istio-system logs ds/istio-cni-node)',
    },
    {
      command: `kubectl apply -f ${rel(ambientFile)} && kubectl -n ambient-demo get pod ambient-demo -o jsonpath='{.metadata.annotations}{"\\n"}'; kubectl -n ambient-demo describe pod ambient-demo | tail -5`,
      look: 'with the default profile the agent leaves the pod alone (no ambient.istio.io/redirection annotation); with CHART_SET=profile=ambient and no ztunnel the sandbox waits: "ztunnel did not take the pod"',
    },
  ];
}
