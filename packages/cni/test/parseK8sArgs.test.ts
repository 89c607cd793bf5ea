import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniError, ErrorCode, parseK8sArgs } from '@istio-cni/cni';

const FULL = 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=u-1';

describe('parseK8sArgs (types.LoadArgs into K8sArgs)', () => {
  it('reads every Kubernetes key', () => {
    assert.deepEqual(parseK8sArgs(FULL), { podName: 'web-0', podNamespace: 'default', podInfraContainerId: 'c0ffee', podUid: 'u-1' });
  });

  it('treats an empty string as no args', () => {
    assert.deepEqual(parseK8sArgs(''), { podName: '', podNamespace: '', podInfraContainerId: '', podUid: '' });
  });

  it('leaves missing keys empty', () => {
    assert.deepEqual(parseK8sArgs('K8S_POD_NAME=a'), { podName: 'a', podNamespace: '', podInfraContainerId: '', podUid: '' });
  });

  it('accepts unknown keys when IgnoreUnknown is present, in any position', () => {
    assert.equal(parseK8sArgs('FOO=bar;K8S_POD_NAME=a;IgnoreUnknown=1').podName, 'a');
    assert.equal(parseK8sArgs('IgnoreUnknown=true;FOO=bar').podName, '');
    assert.equal(parseK8sArgs('IgnoreUnknown=TRUE;FOO=bar').podName, '');
  });

  it('rejects unknown keys when IgnoreUnknown is absent or false, listing them', () => {
    assert.throws(() => parseK8sArgs('K8S_POD_NAME=a;FOO=bar;X=y'), { message: 'ARGS: unknown args ["FOO=bar" "X=y"]' });
    assert.throws(() => parseK8sArgs('IgnoreUnknown=0;FOO=bar'), { message: 'ARGS: unknown args ["FOO=bar"]' });
    assert.throws(() => parseK8sArgs('IgnoreUnknown=1;IgnoreUnknown=false;FOO=bar'), { message: 'ARGS: unknown args ["FOO=bar"]' });
  });

  it('matches keys exactly (case-sensitive)', () => {
    assert.throws(() => parseK8sArgs('k8s_pod_name=a'), { message: 'ARGS: unknown args ["k8s_pod_name=a"]' });
    assert.throws(() => parseK8sArgs('ignoreunknown=1;X=y'), { message: 'ARGS: unknown args ["ignoreunknown=1" "X=y"]' });
  });

  it('rejects a non-boolean IgnoreUnknown with the reference text', () => {
    assert.throws(() => parseK8sArgs('IgnoreUnknown=Yes'), {
      message: 'ARGS: error parsing value of pair "IgnoreUnknown=Yes": Boolean unmarshal error: invalid input yes)',
    });
  });

  const MALFORMED = ['K8S_POD_NAME', 'K8S_POD_NAME=a=b', 'K8S_POD_NAME=a;', ';K8S_POD_NAME=a', 'a;;b', '='.repeat(2)];
  for (const args of MALFORMED) {
    it(`rejects the malformed pair list ${JSON.stringify(args)}`, () => {
      assert.throws(
        () => parseK8sArgs(args),
        (e: unknown) => e instanceof CniError && e.code === ErrorCode.Internal && e.message.startsWith('ARGS: invalid pair '),
      );
    });
  }

  it('quotes the offending pair like Go %q', () => {
    assert.throws(() => parseK8sArgs('IgnoreUnknown=1;a\tb'), { message: 'ARGS: invalid pair "a\\tb"' });
  });

  it('lets the last duplicate win', () => {
    assert.equal(parseK8sArgs('K8S_POD_NAME=a;K8S_POD_NAME=b').podName, 'b');
  });

  it('treats an empty key as unknown and an empty value as empty', () => {
    assert.equal(parseK8sArgs('IgnoreUnknown=1;=x;K8S_POD_UID=').podUid, '');
    assert.throws(() => parseK8sArgs('=x'), { message: 'ARGS: unknown args ["=x"]' });
  });

  it('refuses the embedded CommonArgs field name as Go reflection does', () => {
    assert.throws(() => parseK8sArgs('CommonArgs=1'), /cannot unmarshal into field 'CommonArgs'/);
  });
});
