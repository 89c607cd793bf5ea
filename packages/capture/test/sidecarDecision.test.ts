import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isAgentPod, isKubernetesPod, sidecarDecision } from '@istio-cni/capture';
import type { Container, Pod } from '@istio-cni/capture';

const STATUS = { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' };

function pod(
  opts: {
    containers?: Container[];
    initContainers?: Container[];
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  } = {},
): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', labels: opts.labels ?? {}, annotations: opts.annotations ?? STATUS },
    spec: {
      initContainers: opts.initContainers ?? [],
      containers: opts.containers ?? [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }],
    },
  };
}

const skipped = (p: Pod, reason: RegExp): void => {
  const d = sidecarDecision(p);
  assert.equal(d.redirect, false);
  if (!d.redirect) assert.match(d.reason, reason);
};

test('isAgentPod matches only istio-cni-node-* in the agent namespace', () => {
  assert.equal(isAgentPod('istio-cni-node-abcde', 'istio-system', 'istio-system'), true);
  assert.equal(isAgentPod('istio-cni-node-abcde', 'default', 'istio-system'), false);
  assert.equal(isAgentPod('istio-cni-nodeX', 'istio-system', 'istio-system'), false);
  assert.equal(isAgentPod('my-istio-cni-node-1', 'istio-system', 'istio-system'), false);
});

test('isKubernetesPod needs both name and namespace', () => {
  assert.equal(isKubernetesPod('p', 'ns'), true);
  assert.equal(isKubernetesPod('', 'ns'), false);
  assert.equal(isKubernetesPod('p', ''), false);
});

test('an injected sidecar pod is redirected', () => {
  assert.deepEqual(sidecarDecision(pod()), { redirect: true });
});

test('a native sidecar (istio-proxy as init container) is redirected', () => {
  assert.deepEqual(sidecarDecision(pod({ initContainers: [{ name: 'istio-proxy' }], containers: [{ name: 'app' }] })), { redirect: true });
});

test('skips a pod with an istio-init container, even with a proxy', () => {
  skipped(pod({ initContainers: [{ name: 'istio-init' }] }), /istio-init/);
});

test('skips when DISABLE_ENVOY parses true on istio-proxy; non-bool or false is ignored', () => {
  const withEnv = (value: string): Pod => pod({ containers: [{ name: 'istio-proxy', env: [{ name: 'DISABLE_ENVOY', value }] }] });
  skipped(withEnv('true'), /DISABLE_ENVOY/);
  skipped(withEnv('1'), /DISABLE_ENVOY/);
  assert.deepEqual(sidecarDecision(withEnv('false')), { redirect: true });
  assert.deepEqual(sidecarDecision(withEnv('yes')), { redirect: true });
});

test('skips a pod without istio-proxy', () => {
  skipped(pod({ containers: [{ name: 'app' }] }), /no istio-proxy/);
});

test('skips a gateway (proxy type router); short or non-proxy args are fine', () => {
  skipped(pod({ containers: [{ name: 'istio-proxy', args: ['proxy', 'router'] }] }), /proxy type "router"/);
  assert.deepEqual(sidecarDecision(pod({ containers: [{ name: 'istio-proxy', args: ['proxy'] }] })), { redirect: true });
  assert.deepEqual(sidecarDecision(pod({ containers: [{ name: 'istio-proxy', args: ['run', 'router'] }] })), { redirect: true });
});

test('inject=false label or annotation skips; the label wins over the annotation', () => {
  skipped(pod({ labels: { 'sidecar.istio.io/inject': 'false' } }), /inject/);
  skipped(pod({ annotations: { ...STATUS, 'sidecar.istio.io/inject': 'false' } }), /inject/);
  assert.deepEqual(
    sidecarDecision(
      pod({
        labels: { 'sidecar.istio.io/inject': 'true' },
        annotations: { ...STATUS, 'sidecar.istio.io/inject': 'false' },
      }),
    ),
    { redirect: true },
  );
  skipped(
    pod({
      labels: { 'sidecar.istio.io/inject': 'false' },
      annotations: { ...STATUS, 'sidecar.istio.io/inject': 'true' },
    }),
    /inject/,
  );
});

test('non-boolean inject values are ignored', () => {
  assert.deepEqual(sidecarDecision(pod({ labels: { 'sidecar.istio.io/inject': 'disabled' } })), { redirect: true });
  // A non-bool label still shadows a false annotation, as upstream does.
  assert.deepEqual(
    sidecarDecision(
      pod({
        labels: { 'sidecar.istio.io/inject': 'maybe' },
        annotations: { ...STATUS, 'sidecar.istio.io/inject': 'false' },
      }),
    ),
    { redirect: true },
  );
});

test('skips a pod without the sidecar status annotation', () => {
  skipped(pod({ annotations: {} }), /sidecar\.istio\.io\/status/);
});

test('skip reasons are checked in upstream order', () => {
  skipped(pod({ initContainers: [{ name: 'istio-init' }], containers: [{ name: 'app' }], annotations: {} }), /istio-init/);
  skipped(pod({ containers: [{ name: 'app' }], annotations: {} }), /no istio-proxy/);
});
