import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AnnotationError,
  DEFAULT_ENABLEMENT_SELECTORS,
  captureFailure,
  decidePod,
  missingRulesFailure,
  redirectFromPod,
  type Namespace,
  type Pod,
  type PodDecisionInput,
} from '@istio-cni/capture';

const STATUS = { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' };

const sidecarPod: Pod = {
  metadata: { name: 'web-0', namespace: 'default', annotations: STATUS },
  spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }] },
};
const plainPod: Pod = { metadata: { name: 'web-0', namespace: 'default' }, spec: { containers: [{ name: 'app' }] } };
const ambientPod: Pod = {
  metadata: { name: 'web-0', namespace: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } },
  spec: { containers: [{ name: 'app' }] },
};
const ambientNamespace: Namespace = { metadata: { name: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } } };

function input(over: Partial<PodDecisionInput> = {}): PodDecisionInput {
  return {
    podName: 'web-0',
    podNamespace: 'default',
    policy: { agentNamespace: 'istio-system', excludeNamespaces: ['kube-system'] },
    ambient: { enabled: true, selectors: DEFAULT_ENABLEMENT_SELECTORS },
    ...over,
  };
}

const found = (pod: Pod | undefined, namespace?: Namespace) => ({ found: { pod, namespace } });

test('an excluded namespace passes through before any pod is read', () => {
  assert.deepEqual(decidePod(input({ podNamespace: 'kube-system' })), { action: 'skip', reason: 'excluded namespace' });
  // The local decision wins even when a mesh pod was read.
  assert.deepEqual(decidePod(input({ podNamespace: 'kube-system', ...found(sidecarPod) })), {
    action: 'skip',
    reason: 'excluded namespace',
  });
});

test('the agent own pod and a non-Kubernetes invocation pass through', () => {
  assert.deepEqual(decidePod(input({ podName: 'istio-cni-node-x1', podNamespace: 'istio-system' })), {
    action: 'skip',
    reason: 'istio-cni agent pod',
  });
  assert.deepEqual(decidePod(input({ podName: '', podNamespace: '' })), { action: 'skip', reason: 'not a kubernetes pod' });
});

test('any other pod needs its API object first', () => {
  assert.deepEqual(decidePod(input()), { action: 'lookup' });
});

test('a pod the API does not know fails with code 11 naming it', () => {
  assert.deepEqual(decidePod(input(found(undefined))), {
    action: 'fail',
    code: 11,
    msg: 'pod default/web-0 not found in the Kubernetes API',
  });
});

test('a pod with neither sidecar nor ambient selection passes through with the sidecar skip reason', () => {
  assert.deepEqual(decidePod(input(found(plainPod))), { action: 'skip', reason: 'pod has no istio-proxy container' });
  assert.deepEqual(decidePod(input(found(plainPod, { metadata: { name: 'default' } }))), {
    action: 'skip',
    reason: 'pod has no istio-proxy container',
  });
});

test('a sidecar pod is captured', () => {
  assert.deepEqual(decidePod(input(found(sidecarPod))), { action: 'sidecar', pod: sidecarPod });
});

test('a pod selected for ambient (by its labels or its namespace) is enrolled', () => {
  assert.deepEqual(decidePod(input(found(ambientPod))), { action: 'ambient', pod: ambientPod });
  assert.deepEqual(decidePod(input(found(plainPod, ambientNamespace))), { action: 'ambient', pod: plainPod });
});

test('ambient selection only counts with ambient on', () => {
  const off = { ambient: { enabled: false, selectors: DEFAULT_ENABLEMENT_SELECTORS } };
  assert.deepEqual(decidePod(input({ ...off, ...found(plainPod, ambientNamespace) })), {
    action: 'skip',
    reason: 'pod has no istio-proxy container',
  });
});

test('a sidecar-injected pod in an ambient namespace stays a sidecar pod', () => {
  assert.deepEqual(decidePod(input(found(sidecarPod, ambientNamespace))), { action: 'sidecar', pod: sidecarPod });
});

test('an invalid annotation is code 7 with a message naming the annotation and the value', () => {
  const bad: Pod = {
    ...sidecarPod,
    metadata: { ...sidecarPod.metadata, annotations: { ...STATUS, 'traffic.sidecar.istio.io/includeInboundPorts': '80,x' } },
  };
  let thrown: unknown;
  try {
    redirectFromPod(bad);
  } catch (err) {
    thrown = err;
  }
  assert.ok(thrown instanceof AnnotationError);
  const refused = captureFailure(thrown);
  assert.equal(refused?.code, 7);
  assert.match(refused?.msg ?? '', /traffic\.sidecar\.istio\.io\/includeInboundPorts="80,x"/);
  assert.equal(refused?.details, undefined);
});

test('other capture failures are not the pod fault', () => {
  assert.equal(captureFailure(new Error('iptables-restore: exit status 4')), undefined);
  assert.equal(captureFailure('boom'), undefined);
});

test('a CHECK with missing rules is code 999 listing at most 20 differences', () => {
  assert.equal(missingRulesFailure([]), undefined);
  assert.deepEqual(missingRulesFailure(['nat ISTIO_OUTPUT missing']), {
    code: 999,
    msg: 'sidecar capture rules are not in place',
    details: 'nat ISTIO_OUTPUT missing',
  });
  const many = Array.from({ length: 25 }, (_, i) => `rule ${i}`);
  assert.equal(missingRulesFailure(many)?.details, many.slice(0, 20).join('; '));
});
