import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CniError,
  ErrorCode,
  parseConfList,
  parseNetConf,
  validAttachments,
  validateContainerId,
  validateInterfaceName,
  validateNetworkName,
} from '@istio-cni/cni';

const isCode = (code: number, msg?: string) => (e: unknown) =>
  e instanceof CniError && e.code === code && (msg === undefined || e.message === msg);

describe('parseNetConf', () => {
  it('keeps every key, unknown ones included', () => {
    const conf = parseNetConf('{"cniVersion":"1.0.0","name":"n","type":"istio-cni","ambient_enabled":true,"x":{"y":[1]}}');
    assert.equal(conf.cniVersion, '1.0.0');
    assert.equal(conf.type, 'istio-cni');
    assert.deepEqual(conf.raw['x'], { y: [1] });
    assert.equal(conf.raw['ambient_enabled'], true);
    assert.equal(conf.prevResult, undefined);
  });

  it('accepts Buffers and an absent cniVersion or type', () => {
    const conf = parseNetConf(Buffer.from('{"name":"n"}'));
    assert.equal(conf.cniVersion, '');
    assert.equal(conf.type, '');
  });

  it('matches standard keys case-insensitively like Go', () => {
    assert.equal(parseNetConf('{"Name":"n","CNIVERSION":"0.4.0"}').cniVersion, '0.4.0');
  });

  it('reports bad JSON with the Go scanner text (code 6)', () => {
    assert.throws(() => parseNetConf('{"name":'), isCode(6, 'error parsing network configuration: unexpected end of JSON input'));
    assert.throws(() => parseNetConf('[]'), isCode(6, 'error parsing network configuration: expected a JSON object, got array'));
  });

  it('names a wrongly typed standard key (code 6)', () => {
    assert.throws(
      () => parseNetConf('{"name":"n","type":5}'),
      isCode(6, 'error parsing network configuration: field "type" must be a string, got number'),
    );
  });

  it('requires a name (code 7)', () => {
    assert.throws(() => parseNetConf('{"cniVersion":"1.0.0"}'), isCode(7, 'missing network name'));
  });

  it('reads prevResult with the config version schema', () => {
    const conf = parseNetConf(JSON.stringify({ cniVersion: '0.2.0', name: 'n', prevResult: { ip4: { ip: '10.0.0.2/24' } } }));
    assert.deepEqual(conf.prevResult?.ips, [{ address: '10.0.0.2/24' }]);
  });

  it('requires the prevResult cniVersion unless told to take the config one', () => {
    const text = JSON.stringify({ cniVersion: '1.0.0', name: 'n', prevResult: { ips: [{ address: '10.0.0.2/24' }] } });
    assert.throws(
      () => parseNetConf(text),
      isCode(6, 'could not parse prevResult: result type supports [1.0.0 1.1.0] but unmarshalled CNIVersion is ""'),
    );
    assert.equal(parseNetConf(text, { prevResultVersionFromConfig: true }).prevResult?.cniVersion, '1.0.0');
  });

  it('treats a null prevResult as none', () => {
    assert.equal(parseNetConf('{"name":"n","prevResult":null}').prevResult, undefined);
  });
});

describe('validAttachments (GC, cni.dev/valid-attachments)', () => {
  it('reads the list', () => {
    const conf = parseNetConf(
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'n',
        'cni.dev/valid-attachments': [
          { containerID: 'a', ifname: 'eth0' },
          { containerID: 'b', ifname: 'net1' },
        ],
      }),
    );
    assert.deepEqual(validAttachments(conf), [
      { containerId: 'a', ifName: 'eth0' },
      { containerId: 'b', ifName: 'net1' },
    ]);
  });
  it('is empty when absent', () => {
    assert.deepEqual(validAttachments(parseNetConf('{"name":"n"}')), []);
  });
  it('names a malformed element', () => {
    const conf = parseNetConf(JSON.stringify({ name: 'n', 'cni.dev/valid-attachments': [{ containerID: 1 }] }));
    assert.throws(() => validAttachments(conf), isCode(6, 'cni.dev/valid-attachments[0].containerID: expected a string, got number'));
    const notList = parseNetConf(JSON.stringify({ name: 'n', 'cni.dev/valid-attachments': 'a' }));
    assert.throws(() => validAttachments(notList), isCode(6, 'cni.dev/valid-attachments: expected an array, got string'));
  });
});

describe('parseConfList', () => {
  const LIST = { cniVersion: '1.0.0', name: 'k8s-pod-network', plugins: [{ type: 'calico' }, { type: 'istio-cni', x: 1 }] };
  it('reads a list', () => {
    const list = parseConfList(JSON.stringify({ ...LIST, disableCheck: 'true', disableGC: false }));
    assert.equal(list.name, 'k8s-pod-network');
    assert.equal(list.plugins.length, 2);
    assert.equal(list.disableCheck, true);
    assert.equal(list.disableGC, false);
    assert.equal(list.raw['cniVersion'], '1.0.0');
  });
  const BAD: [string, unknown, number, string][] = [
    ['no name', { plugins: [{ type: 'a' }] }, 7, 'error parsing configuration list: no name'],
    ['a bad name', { name: 'a b', plugins: [{ type: 'a' }] }, 7, 'invalid characters found in network name'],
    ['no plugins', { name: 'n' }, 7, "error parsing configuration list: no 'plugins' key"],
    ['plugins as object', { name: 'n', plugins: {} }, 7, "error parsing configuration list: invalid 'plugins' type object"],
    ['an empty plugin list', { name: 'n', plugins: [] }, 7, 'error parsing configuration list: no plugins in list'],
    [
      'a plugin without type',
      { name: 'n', plugins: [{}] },
      7,
      "error parsing configuration list: failed to parse plugin config 0: missing 'type'",
    ],
    [
      'a bad disableCheck',
      { name: 'n', disableCheck: 'maybe', plugins: [{ type: 'a' }] },
      7,
      'error parsing configuration list: invalid disableCheck value "maybe"',
    ],
  ];
  for (const [name, json, code, msg] of BAD) {
    it(`rejects ${name}`, () => assert.throws(() => parseConfList(JSON.stringify(json)), isCode(code, msg)));
  }
  it('rejects bad JSON (code 6)', () => assert.throws(() => parseConfList('{'), isCode(6)));
});

describe('name validation (pkg/utils)', () => {
  it('container IDs', () => {
    validateContainerId('c0ffee-1_2.3');
    assert.throws(() => validateContainerId(''), isCode(ErrorCode.UnknownContainer, 'missing containerID'));
    assert.throws(() => validateContainerId('-a'), isCode(ErrorCode.InvalidEnvironment, 'invalid characters in containerID'));
  });
  it('network names', () => {
    validateNetworkName('k8s-pod-network');
    assert.throws(() => validateNetworkName(''), isCode(7, 'missing network name:'));
    assert.throws(() => validateNetworkName('a/b'), isCode(7, 'invalid characters found in network name'));
  });
  it('interface names', () => {
    validateInterfaceName('eth0');
    validateInterfaceName('a'.repeat(15));
    validateInterfaceName('eth\ufeff0'); // not a space for Go's unicode.IsSpace
    assert.throws(
      () => validateInterfaceName('a'.repeat(16)),
      (e: unknown) => e instanceof CniError && e.details === 'interface name should be less than 16 characters',
    );
    assert.throws(() => validateInterfaceName('eth\u00850'), isCode(4, 'interface name contains / or : or whitespace characters'));
  });
});
