import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { parseInstallerKubeconfig } from '@istio-cni/kube';
import { buildKubeconfig, type KubeconfigInput } from '../src/installer/kubeconfig.ts';

const base: KubeconfigInput = {
  k8sServiceProtocol: 'https',
  k8sServiceHost: '10.96.0.1',
  k8sServicePort: '443',
  caData: Buffer.from('-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIBADAKBggqhkjOPQQDAjAA\n-----END CERTIFICATE-----\n'),
  skipTlsVerify: false,
  token: 'eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJl-_',
};

describe("the plugin reads the installer's kubeconfig without a YAML parser", () => {
  const cases: Record<string, KubeconfigInput> = {
    'CA data': base,
    'skip TLS verify': { ...base, skipTlsVerify: true },
    'an IPv6 service address': { ...base, k8sServiceHost: 'fd00:10:96::1' },
    'a host name and plain http': { ...base, k8sServiceProtocol: 'http', k8sServiceHost: 'kubernetes.default.svc' },
  };
  for (const [what, input] of Object.entries(cases)) {
    it(`${what}: read directly, the same document YAML gives`, () => {
      const text = buildKubeconfig(input);
      const doc = parseInstallerKubeconfig(text);
      assert.ok(doc, 'read directly');
      assert.deepEqual(doc, parse(text));
    });
  }

  it('a token file ending in a newline is left to the general parser, which keeps the newline as before', () => {
    const text = buildKubeconfig({ ...base, token: `${base.token}\n` });
    assert.equal(parseInstallerKubeconfig(text), undefined);
    assert.equal((parse(text) as { users: { user: { token: string } }[] }).users[0]?.user.token, `${base.token}\n`);
  });
});
