import { mkdirSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { CLUSTER_DIR, type ClusterAddressing } from './layout.ts';

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
 * The agent pod on the node `pod` (in the current namespace) runs on, as a shell substitution: with
 * several nodes, `logs ds/<name>` would pick any node's agent.
 */
function agentOfPodsNode(daemonSet: string, pod: string): string {
  const nodeOfPod = `$(kubectl get pod ${pod} -o jsonpath='{.spec.nodeName}')`;
  return `$(kubectl -n ${RELEASE_NAMESPACE} get pod -l k8s-app=${daemonSet} --field-selector spec.nodeName=${nodeOfPod} -o name)`;
}

/**
 * Two manifests for the workload image: a sidecar-style pod whose "proxy" answers on 15001 (so a
 * captured outbound connection says so, in each of the cluster's families), and a namespace
 * labelled for ambient with one pod; the commands that try them (kubectl is the rig's, on PATH),
 * look at the right node's agent and into the pod's netns (`scripts/cluster/pod-exec`).
 */
export function writeExamples(workloadImage: string, daemonSet: string, ambient: boolean, addressing: ClusterAddressing): Example[] {
  const dualStack = addressing.plans.length > 1;
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
        {
          ...container('istio-proxy', ['nc', '-ll', '-p', '15001', '-e', 'echo', 'captured by istio-proxy:15001'], 1337),
          // What istiod's injector sets on a dual-stack cluster: capture both families, not just the first address's.
          ...(dualStack ? { env: [{ name: 'ISTIO_DUAL_STACK', value: 'true' }] } : {}),
        },
      ],
    },
  };
  const ambientList = {
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
  writeFileSync(ambientFile, `${JSON.stringify(ambientList, null, 2)}\n`);
  const rel = (p: string) => relative(REPO_ROOT, p);
  const outbound = addressing.plans.map((p) => `kubectl exec sidecar-demo -c app -- nc -w 2 ${p.nowhere} 80`).join(' && ');
  const families = addressing.plans.map((p) => `IPv${p.family}`).join(' and ');
  return [
    {
      command: `kubectl apply -f ${rel(sidecarFile)} && kubectl wait --for=condition=Ready --timeout=120s pod/sidecar-demo && ${outbound}`,
      look: `prints "captured by istio-proxy:15001"${dualStack ? ' twice' : ''}: the outbound connection (${families}, to an address nothing answers on) was redirected into the pod's proxy port`,
    },
    {
      command: `kubectl -n ${RELEASE_NAMESPACE} logs ${agentOfPodsNode(daemonSet, 'sidecar-demo')} | grep sidecar-demo`,
      look: 'the agent on the node sidecar-demo runs on logs "sidecar capture programmed" for default/sidecar-demo',
    },
    ...addressing.plans.map((p) => ({
      command: `scripts/cluster/pod-exec default/sidecar-demo -- ${p.family === 6 ? 'ip6tables-save' : 'iptables-save'}`,
      look: `the pod's IPv${p.family} capture rules (ISTIO_OUTPUT, ISTIO_REDIRECT → 15001), run in its netns on its node; also \`nft list ruleset\`, \`ss -ltn\``,
    })),
    {
      command: `kubectl apply -f ${rel(ambientFile)} && sleep 10; kubectl -n ambient-demo get pod ambient-demo -o jsonpath='{.metadata.annotations}{"\\n"}'; kubectl -n ambient-demo describe pod ambient-demo | tail -5`,
      look: ambient
        ? 'with no ztunnel on the node the sandbox waits: "ztunnel did not take the pod" (FailedCreatePodSandBox), annotation ambient.istio.io/redirection: pending'
        : 'with the default profile the agent leaves the pod alone (no ambient.istio.io/redirection annotation); with CHART_SET=profile=ambient and no ztunnel the sandbox waits: "ztunnel did not take the pod"',
    },
  ];
}
