import type { KubeObject } from './fakeKubeApi.ts';

/** The node name `startDaemon` gives the agent (KUBERNETES_NODE_NAME). */
export const TEST_NODE = 'test-node';

/** The namespace label that selects a namespace for ambient mode (upstream's default selector). */
export const AMBIENT_LABEL = 'istio.io/dataplane-mode';

/** Upstream's default ambient enablement selectors (the `enablement_selectors` netconf key). */
export const DEFAULT_ENABLEMENT_SELECTORS = [
  { podSelector: { matchLabels: { [AMBIENT_LABEL]: 'ambient' } } },
  {
    podSelector: { matchExpressions: [{ key: AMBIENT_LABEL, operator: 'NotIn', values: ['none'] }] },
    namespaceSelector: { matchLabels: { [AMBIENT_LABEL]: 'ambient' } },
  },
];

const SIDECAR_STATUS = JSON.stringify({
  initContainers: ['istio-validation'],
  containers: ['istio-proxy'],
  volumes: [
    'workload-socket',
    'credential-socket',
    'workload-certs',
    'istio-envoy',
    'istio-data',
    'istio-podinfo',
    'istio-token',
    'istiod-ca-cert',
  ],
  imagePullSecrets: null,
  revision: 'default',
});

function appContainer(): Record<string, unknown> {
  return {
    name: 'app',
    image: 'docker.io/library/nginx:1.27',
    ports: [{ containerPort: 8080, name: 'http', protocol: 'TCP' }],
    resources: {},
    terminationMessagePath: '/dev/termination-log',
    imagePullPolicy: 'IfNotPresent',
  };
}

/**
 * A pod the way istiod's injector leaves it in CNI mode: `istio-validation` init container (not
 * `istio-init`), an `istio-proxy` sidecar container, and the `sidecar.istio.io/status` annotation.
 */
export function sidecarPod(namespace: string, name: string, nodeName = TEST_NODE): KubeObject {
  return {
    metadata: {
      name,
      namespace,
      labels: { app: name, 'security.istio.io/tlsMode': 'istio', 'service.istio.io/canonical-name': name },
      annotations: {
        'istio.io/rev': 'default',
        'kubectl.kubernetes.io/default-container': 'app',
        'kubectl.kubernetes.io/default-logs-container': 'app',
        'prometheus.io/path': '/stats/prometheus',
        'prometheus.io/port': '15020',
        'prometheus.io/scrape': 'true',
        'sidecar.istio.io/status': SIDECAR_STATUS,
      },
    },
    spec: {
      nodeName,
      restartPolicy: 'Always',
      serviceAccountName: 'default',
      initContainers: [
        {
          name: 'istio-validation',
          image: 'docker.io/istio/proxyv2:1.24.0',
          args: [
            'istio-iptables',
            '-p',
            '15001',
            '-z',
            '15006',
            '-u',
            '1337',
            '-m',
            'REDIRECT',
            '-i',
            '*',
            '-x',
            '',
            '-b',
            '*',
            '-d',
            '15090,15021,15020',
            '--log_output_level=default:info',
            '--run-validation',
            '--skip-rule-apply',
          ],
          securityContext: { runAsUser: 1337, runAsGroup: 1337, runAsNonRoot: true, capabilities: { drop: ['ALL'] } },
        },
      ],
      containers: [
        appContainer(),
        {
          name: 'istio-proxy',
          image: 'docker.io/istio/proxyv2:1.24.0',
          args: [
            'proxy',
            'sidecar',
            '--domain',
            `${namespace}.svc.cluster.local`,
            '--proxyLogLevel=warning',
            '--proxyComponentLogLevel=misc:error',
            '--log_output_level=default:info',
          ],
          env: [
            { name: 'PILOT_CERT_PROVIDER', value: 'istiod' },
            { name: 'CA_ADDR', value: 'istiod.istio-system.svc:15012' },
            { name: 'POD_NAME', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.name' } } },
            { name: 'ISTIO_META_INTERCEPTION_MODE', value: 'REDIRECT' },
          ],
          ports: [{ containerPort: 15090, name: 'http-envoy-prom', protocol: 'TCP' }],
          securityContext: { runAsUser: 1337, runAsGroup: 1337, runAsNonRoot: true, readOnlyRootFilesystem: true },
        },
      ],
    },
    status: { phase: 'Pending', qosClass: 'BestEffort' },
  };
}

/** A pod with no mesh involvement at all. */
export function plainPod(namespace: string, name: string, nodeName = TEST_NODE): KubeObject {
  return {
    metadata: { name, namespace, labels: { app: name } },
    spec: { nodeName, restartPolicy: 'Always', serviceAccountName: 'default', containers: [appContainer()] },
    status: { phase: 'Pending', qosClass: 'BestEffort' },
  };
}

export function namespaceObject(name: string, labels: Record<string, string> = {}): KubeObject {
  return {
    metadata: { name, labels: { 'kubernetes.io/metadata.name': name, ...labels } },
    spec: { finalizers: ['kubernetes'] },
    status: { phase: 'Active' },
  };
}
