import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { doctorSchemaProblems } from './doctorSchema.ts';

const report = () => ({
  schemaVersion: 1,
  ok: false,
  node: {
    binaries: [{ dir: '/host/opt/cni/bin', present: true, identical: true }],
    cniConfig: { file: '/host/etc/cni/net.d/10-bridge.conflist', primary: true, position: 3, plugins: 3 },
    kubeconfig: { path: '/var/run/istio-cni/istio-cni-kubeconfig', present: true },
  },
  daemon: {
    reachable: true,
    backend: 'iptables-nft',
    installer: { ready: true, passes: 1, lastPassAt: '2026-12-01T22:54:31.610Z', lastError: null },
    ambient: { enabled: false, ztunnelConnections: null },
    verification: { intervalSeconds: 60, reportOnly: true },
    agent: true,
    pods: [
      {
        pod: 'default/ratings-v1-0',
        mode: 'sidecar',
        status: 'drift',
        drift: [{ kind: 'rules_missing', detail: 'ipv4 nat OUTPUT: missing "-j ISTIO_OUTPUT"' }],
        lastVerification: { at: '2026-12-01T22:54:40.112Z', status: 'drift', action: 'reported' },
      },
      { pod: 'default/plain-0', mode: 'none', status: 'ok', drift: [], lastVerification: null },
    ],
  },
  problems: ['default/ratings-v1-0: rules_missing (ipv4 nat OUTPUT: missing "-j ISTIO_OUTPUT")'],
});

describe('doctorSchemaProblems', () => {
  it('accepts the documented shape, an unreachable daemon and extra fields', () => {
    assert.deepEqual(doctorSchemaProblems(report()), []);
    assert.deepEqual(doctorSchemaProblems({ ...report(), daemon: { reachable: false, error: 'connect ENOENT' }, added: 1 }), []);
  });

  it('names each field that is missing or of the wrong type', () => {
    const r = report();
    r.daemon.pods[0] = { ...r.daemon.pods[0], mode: 'proxy' } as (typeof r.daemon.pods)[0];
    const { verification: _, ...noVerification } = r.daemon;
    assert.deepEqual(doctorSchemaProblems({ ...r, schemaVersion: 2, daemon: noVerification }), [
      '$.schemaVersion: expected one of 1, got 2',
      '$.daemon.verification: expected an object, got undefined',
      '$.daemon.pods[0].mode: expected one of "sidecar", "ambient", "none", got "proxy"',
    ]);
    assert.deepEqual(doctorSchemaProblems({ ...report(), ok: true }), ['$.problems: not empty although ok is true']);
  });
});
