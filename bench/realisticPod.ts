/**
 * What kubelet, the scheduler and the API server add to a pod, so that the daemon's memory with N
 * cached pods is measured with pods of a realistic size (~6 KiB of JSON each, a third of it
 * managedFields) rather than the minimal objects the tests use.
 */
import type { KubeObject } from '../test/support/fakeKubeApi.ts';

export function realisticPod(pod: KubeObject): KubeObject {
  const name = pod.metadata.name;
  const ip = (pod as { status?: { podIP?: string } }).status?.podIP ?? '10.0.0.1';
  const spec = (pod as { spec?: Record<string, unknown> }).spec ?? {};
  const time = '2026-12-01T00:00:00Z';
  const env = ['LOG_LEVEL', 'HTTP_PORT', 'UPSTREAM_URL', 'FEATURE_FLAGS', 'REGION'].map((n, i) => ({
    name: n,
    value: `value-${i}-${name}`,
  }));
  const fieldsV1 = {
    'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} }, 'f:ownerReferences': { '.': {}, [`k:{"uid":"rs-${name}"}`]: {} } },
    'f:spec': {
      'f:containers': {
        'k:{"name":"app"}': {
          '.': {},
          'f:env': Object.fromEntries(env.map((e) => [`k:{"name":"${e.name}"}`, { '.': {}, 'f:name': {}, 'f:value': {} }])),
          'f:image': {},
          'f:name': {},
          'f:ports': {},
          'f:resources': {},
        },
      },
      'f:dnsPolicy': {},
      'f:restartPolicy': {},
      'f:schedulerName': {},
      'f:securityContext': {},
      'f:terminationGracePeriodSeconds': {},
    },
  };
  return {
    ...pod,
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      ...pod.metadata,
      generateName: `${name}-7d9f8c6b5-`,
      creationTimestamp: time,
      annotations: { 'kubectl.kubernetes.io/restartedAt': time, 'prometheus.io/scrape': 'true', 'prometheus.io/port': '8080' },
      ownerReferences: [
        {
          apiVersion: 'apps/v1',
          kind: 'ReplicaSet',
          name: `${name}-7d9f8c6b5`,
          uid: `rs-${name}`,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
      managedFields: [
        { manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'v1', time, fieldsType: 'FieldsV1', fieldsV1 },
        {
          manager: 'kubelet',
          operation: 'Update',
          apiVersion: 'v1',
          time,
          fieldsType: 'FieldsV1',
          subresource: 'status',
          fieldsV1: {
            'f:status': {
              'f:conditions': {},
              'f:containerStatuses': {},
              'f:hostIP': {},
              'f:phase': {},
              'f:podIP': {},
              'f:podIPs': {},
              'f:startTime': {},
            },
          },
        },
      ],
    },
    spec: {
      ...spec,
      volumes: [
        {
          name: 'kube-api-access-x7k2p',
          projected: {
            defaultMode: 420,
            sources: [
              { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
              { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
              { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
            ],
          },
        },
      ],
      containers: ((spec.containers as Record<string, unknown>[] | undefined) ?? []).map((c) => ({
        ...c,
        env,
        resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
        volumeMounts: [{ name: 'kube-api-access-x7k2p', readOnly: true, mountPath: '/var/run/secrets/kubernetes.io/serviceaccount' }],
        readinessProbe: {
          httpGet: { path: '/ready', port: 8080, scheme: 'HTTP' },
          periodSeconds: 10,
          timeoutSeconds: 1,
          successThreshold: 1,
          failureThreshold: 3,
        },
        terminationMessagePath: '/dev/termination-log',
        terminationMessagePolicy: 'File',
        imagePullPolicy: 'IfNotPresent',
      })),
      dnsPolicy: 'ClusterFirst',
      enableServiceLinks: true,
      preemptionPolicy: 'PreemptLowerPriority',
      priority: 0,
      schedulerName: 'default-scheduler',
      securityContext: {},
      terminationGracePeriodSeconds: 30,
      tolerations: [
        { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
        { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      ],
    },
    status: {
      ...((pod as { status?: Record<string, unknown> }).status ?? {}),
      conditions: ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map((type) => ({
        type,
        status: 'True',
        lastProbeTime: null,
        lastTransitionTime: time,
      })),
      containerStatuses: [
        {
          name: 'app',
          ready: true,
          restartCount: 0,
          started: true,
          image: 'docker.io/library/nginx:1.27',
          imageID: 'docker.io/library/nginx@sha256:6784fb0834aa7dbbe12e3d7471e69c290df3e6ba810dc38b34ae33d3c1c05f7d',
          containerID: `containerd://${'0123456789abcdef'.repeat(4)}`,
          lastState: {},
          state: { running: { startedAt: time } },
        },
      ],
      hostIP: '172.18.0.2',
      hostIPs: [{ ip: '172.18.0.2' }],
      podIP: ip,
      startTime: time,
    },
  } as KubeObject;
}
