import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  DEFAULT_ENABLEMENT_SELECTORS,
  ambientEnabledFor,
  labelSelectorMatches,
  namespaceSelectedForAmbient,
  parseEnablementSelectors,
  type Namespace,
  type Pod,
} from '@istio-cni/capture';

function pod(labels: Record<string, string> = {}, extra: { annotations?: Record<string, string>; hostNetwork?: boolean } = {}): Pod {
  return {
    metadata: { name: 'p', namespace: 'ns', labels, ...(extra.annotations ? { annotations: extra.annotations } : {}) },
    spec: { containers: [{ name: 'app' }], ...(extra.hostNetwork ? { hostNetwork: true } : {}) },
  };
}
const ns = (labels: Record<string, string> = {}): Namespace => ({ metadata: { name: 'ns', labels } });
const AMBIENT = { 'istio.io/dataplane-mode': 'ambient' };

describe('ambientEnabledFor with the chart default selectors', () => {
  const cases: [string, Pod, Namespace, boolean][] = [
    ['pod in an ambient namespace', pod(), ns(AMBIENT), true],
    ['pod labelled ambient in an unlabelled namespace', pod(AMBIENT), ns(), true],
    ['pod labelled none in an ambient namespace', pod({ 'istio.io/dataplane-mode': 'none' }), ns(AMBIENT), false],
    ['plain pod in a plain namespace', pod(), ns(), false],
    ['sidecar-injected pod in an ambient namespace', pod({}, { annotations: { 'sidecar.istio.io/status': '{}' } }), ns(AMBIENT), false],
    ['host-network pod labelled ambient', pod(AMBIENT, { hostNetwork: true }), ns(AMBIENT), false],
    ['generic istio-proxy container without status annotation is still ambient', pod(), ns(AMBIENT), true],
  ];
  for (const [name, p, n, want] of cases) {
    it(`${name} → ${want}`, () => assert.equal(ambientEnabledFor(p, n, DEFAULT_ENABLEMENT_SELECTORS), want));
  }

  it('an empty selector list matches nothing', () => {
    assert.equal(ambientEnabledFor(pod(AMBIENT), ns(AMBIENT), []), false);
  });
  it('an entry with empty selectors matches everything', () => {
    assert.equal(ambientEnabledFor(pod(), ns(), [{}]), true);
  });
});

describe('labelSelectorMatches', () => {
  const labels = { app: 'web', tier: 'front' };
  const cases: [string, Parameters<typeof labelSelectorMatches>[0], boolean][] = [
    ['undefined selects all', undefined, true],
    ['matchLabels hit', { matchLabels: { app: 'web' } }, true],
    ['matchLabels miss', { matchLabels: { app: 'db' } }, false],
    ['In hit', { matchExpressions: [{ key: 'tier', operator: 'In', values: ['front', 'back'] }] }, true],
    ['In on a missing key', { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }, false],
    ['NotIn on a missing key', { matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, true],
    ['NotIn hit', { matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['web'] }] }, false],
    ['Exists', { matchExpressions: [{ key: 'app', operator: 'Exists' }] }, true],
    ['DoesNotExist', { matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] }, false],
    [
      'labels and expressions are ANDed',
      { matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['back'] }] },
      false,
    ],
  ];
  for (const [name, sel, want] of cases) it(name, () => assert.equal(labelSelectorMatches(sel, labels), want));
});

describe('namespaceSelectedForAmbient', () => {
  it('only counts selectors with a non-empty namespace part', () => {
    assert.equal(namespaceSelectedForAmbient(ns(AMBIENT), DEFAULT_ENABLEMENT_SELECTORS), true);
    assert.equal(namespaceSelectedForAmbient(ns(), DEFAULT_ENABLEMENT_SELECTORS), false);
    assert.equal(namespaceSelectedForAmbient(ns(), [{ podSelector: { matchLabels: AMBIENT } }]), false);
  });
});

describe('parseEnablementSelectors', () => {
  it('accepts the chart defaults as decoded YAML', () => {
    assert.deepEqual(parseEnablementSelectors(JSON.parse(JSON.stringify(DEFAULT_ENABLEMENT_SELECTORS))).length, 2);
  });
  const bad: [unknown, RegExp][] = [
    [{}, /must be a list/],
    [['x'], /must be an object/],
    [[{ podSelector: { matchLabels: { a: 1 } } }], /matchLabels must map strings/],
    [[{ podSelector: { matchExpressions: [{ key: 'a', operator: 'Like' }] } }], /"Like" is not In/],
    [[{ podSelector: { matchExpressions: [{ key: 'a', operator: 'In', values: [] }] } }], /needs values/],
    [[{ namespaceSelector: { matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] } }], /takes no values/],
  ];
  for (const [input, msg] of bad) it(`rejects ${JSON.stringify(input)}`, () => assert.throws(() => parseEnablementSelectors(input), msg));
});
