import assert from 'node:assert/strict';
import { test } from 'node:test';
import { goConfigFileText, goMarshal, goMarshalIndent, isJsonObject, parseJson } from '@istio-cni/cni';

test('MarshalIndent: four spaces by default, keys in insertion order, empty containers inline', () => {
  assert.equal(goMarshalIndent({ b: 1, a: [], c: {} }), '{\n    "b": 1,\n    "a": [],\n    "c": {}\n}');
  assert.equal(goMarshal({ b: [1, 'x'], a: null }), '{"b":[1,"x"],"a":null}');
});

test('config file text: two spaces and a final newline; Go map keys sorted by UTF-8 bytes at every depth', () => {
  const value = { type: 'x', cniVersion: '0.3.1', plugins: [{ z: true, a: false }], '\u{1F600}': 1, '\uFFFD': 2 };
  assert.equal(
    goConfigFileText(value, 'sorted'),
    '{\n  "cniVersion": "0.3.1",\n  "plugins": [\n    {\n      "a": false,\n      "z": true\n    }\n  ],\n  "type": "x",\n  "\uFFFD": 2,\n  "\u{1F600}": 1\n}\n',
  );
  assert.equal(goConfigFileText({ b: 1, a: 2 }, 'ordered'), '{\n  "b": 1,\n  "a": 2\n}\n');
});

test('strings are escaped as Go does: <, >, &, U+2028, U+2029 and control characters', () => {
  assert.equal(goMarshal('<a&b>\u2028\u2029\n\t\u0001"\\'), '"\\u003ca\\u0026b\\u003e\\u2028\\u2029\\n\\t\\u0001\\"\\\\"');
});

test('parseJson keeps __proto__ as an own key, and the encoder writes it back', () => {
  const parsed = parseJson('{"__proto__":{"x":1},"a":2}');
  assert.ok(isJsonObject(parsed));
  assert.equal(goConfigFileText(parsed, 'sorted'), '{\n  "__proto__": {\n    "x": 1\n  },\n  "a": 2\n}\n');
  assert.equal(isJsonObject([]), false);
  assert.equal(isJsonObject(null), false);
});
