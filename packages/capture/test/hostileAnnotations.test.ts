import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AnnotationError, redirectFromPod } from '@istio-cni/capture';
import type { Pod } from '@istio-cni/capture';
import { HOSTILE_ANNOTATIONS } from './hostileAnnotations.ts';

function podWith(annotation: string, value: string): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', annotations: { 'sidecar.istio.io/status': '{}', [annotation]: value } },
    spec: { containers: [{ name: 'istio-proxy' }] },
  };
}

test('the hostile corpus has at least 200 cases', () => {
  assert.ok(HOSTILE_ANNOTATIONS.length >= 200, `only ${HOSTILE_ANNOTATIONS.length} cases`);
});

test('every hostile annotation value is rejected with an AnnotationError naming it', () => {
  for (const { annotation, value } of HOSTILE_ANNOTATIONS) {
    assert.throws(
      () => redirectFromPod(podWith(annotation, value)),
      (err: unknown) => {
        assert.ok(err instanceof AnnotationError, `not an AnnotationError for ${annotation}=${JSON.stringify(value)}`);
        assert.equal(err.annotation, annotation);
        assert.equal(err.value, value);
        assert.equal(err.code, 'ERR_INVALID_ANNOTATION');
        assert.ok(err.message.startsWith(`invalid annotation ${annotation}=`), err.message);
        assert.ok(err.message.length < 1000, `message too long for ${annotation}`);
        return true;
      },
      `${annotation}=${JSON.stringify(value.slice(0, 80))} was accepted`,
    );
  }
});
