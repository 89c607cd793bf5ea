/**
 * Degraded mode over HTTPS, the way the plugin reaches a real API server: the built `dist/istio-cni`,
 * with no agent answering, reads the pod with the installer's kubeconfig (its CA and token) from a
 * TLS server; it reports a rejected token as Unauthorized and refuses a server its CA did not sign
 * (bounded retries, then code 11). The other degraded-mode cases (sidecar rules, ambient, STATUS)
 * are in agentDegraded.test.ts, against a plain-HTTP stand-in API.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PLUGIN_KUBECONFIG } from '@istio-cni/handoff';
import { buildKubeconfig } from '../../packages/install-cni/src/installer/kubeconfig.ts';
import { EMULATION_SKIP, PLUGIN } from '../support/daemonProcess.ts';
import { execPlugin, type ExecResult } from '../support/execPlugin.ts';
import { missingHostTool } from '../support/hostTools.ts';

const TOKEN = 'plugin-token';
const POD_PATH = '/api/v1/namespaces/default/pods/web-0';
const PREV_RESULT = { cniVersion: '1.0.0', interfaces: [{ name: 'eth0' }], ips: [{ address: '10.1.0.5/24', interface: 0 }], dns: {} };

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A CA, a serving certificate it signs for 127.0.0.1, and a second CA that signed nothing here. */
function makePki(dir: string): { ca: string; otherCa: string; cert: string; key: string } {
  const p = (name: string) => join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', p('ca.key'), '-out', p('ca.crt'), '-days', '1', '-subj', '/CN=test-ca']);
  openssl(['req', '-x509', ...ec, '-keyout', p('other.key'), '-out', p('other.crt'), '-days', '1', '-subj', '/CN=other-ca']);
  openssl(['req', ...ec, '-keyout', p('server.key'), '-out', p('server.csr'), '-subj', '/CN=kube-apiserver']);
  writeFileSync(p('server.ext'), 'subjectAltName=IP:127.0.0.1\n');
  openssl([
    'x509',
    '-req',
    '-in',
    p('server.csr'),
    '-CA',
    p('ca.crt'),
    '-CAkey',
    p('ca.key'),
    '-set_serial',
    '2',
    '-days',
    '1',
    '-extfile',
    p('server.ext'),
    '-out',
    p('server.crt'),
  ]);
  return { ca: p('ca.crt'), otherCa: p('other.crt'), cert: p('server.crt'), key: p('server.key') };
}

function json(res: ExecResult): Record<string, unknown> {
  try {
    return JSON.parse(res.stdout) as Record<string, unknown>;
  } catch {
    throw new Error(`stdout is not JSON (exit ${res.code}): ${res.stdout}\nstderr: ${res.stderr}`);
  }
}

describe('plugin degraded mode over HTTPS (kubeconfig CA and token)', {
  skip: EMULATION_SKIP || missingHostTool('kernel') || false,
}, () => {
  let dir: string;
  let server: Server;
  let port: number;
  const seen: { path: string; authorization: string | undefined }[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'istio-cni-degraded-tls-'));
    const pki = makePki(dir);
    server = createServer({ cert: readFileSync(pki.cert), key: readFileSync(pki.key) }, (req, res) => {
      seen.push({ path: req.url ?? '', authorization: req.headers.authorization });
      req.resume();
      const send = (status: number, body: unknown) => {
        const text = JSON.stringify(body);
        res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
        res.end(text);
      };
      if (req.headers.authorization !== `Bearer ${TOKEN}`) {
        send(401, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'Unauthorized', reason: 'Unauthorized', code: 401 });
      } else if (req.url === POD_PATH) {
        send(200, {
          kind: 'Pod',
          apiVersion: 'v1',
          metadata: { name: 'web-0', namespace: 'default', uid: 'u-1' },
          spec: { nodeName: 'test-node', containers: [{ name: 'app', image: 'nginx' }] },
        });
      } else send(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
    for (const [name, ca, token] of [
      ['good', pki.ca, TOKEN],
      ['rejected-token', pki.ca, 'revoked'],
      ['other-ca', pki.otherCa, TOKEN],
    ] as const) {
      mkdirSync(join(dir, name));
      writeFileSync(
        join(dir, name, PLUGIN_KUBECONFIG),
        buildKubeconfig({
          k8sServiceProtocol: 'https',
          k8sServiceHost: '127.0.0.1',
          k8sServicePort: String(port),
          caData: readFileSync(ca),
          skipTlsVerify: false,
          token,
        }),
        { mode: 0o600 },
      );
    }
  });

  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  });

  /** An ADD of default/web-0 (not in the mesh) with the run dir `name`, where no agent listens. */
  function add(name: string, timeoutMs?: number, extraEnv: Record<string, string> = {}): Promise<ExecResult> {
    const conf = {
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'istio-cni',
      plugin_log_level: 'info',
      cni_agent_run_dir: join(dir, name),
      ambient_enabled: false,
      exclude_namespaces: ['kube-system'],
      pod_namespace: 'istio-system',
      prevResult: PREV_RESULT,
    };
    const env = {
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'c0ffee',
      CNI_NETNS: '/var/run/netns/none',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee',
      ...extraEnv,
    };
    return execPlugin(PLUGIN, env, JSON.stringify(conf), timeoutMs === undefined ? {} : { timeoutMs });
  }

  it('reads the pod over TLS with the kubeconfig CA and token and passes a pod outside the mesh through', async () => {
    seen.length = 0;
    // The runtime's environment may name a proxy (for image pulls): the API is reached directly,
    // as node:https does (Bun's fetch would use it; docs/decisions.md, "The plugin: Bun").
    const deadProxy = 'http://127.0.0.1:9';
    const res = await add('good', undefined, {
      HTTPS_PROXY: deadProxy,
      https_proxy: deadProxy,
      HTTP_PROXY: deadProxy,
      ALL_PROXY: deadProxy,
    });
    assert.equal(res.code, 0, `stdout ${res.stdout}\nstderr ${res.stderr}`);
    assert.deepEqual(json(res), PREV_RESULT);
    assert.deepEqual(seen, [{ path: POD_PATH, authorization: `Bearer ${TOKEN}` }]);
  });

  it('a rejected token is reported as Unauthorized with code 11, without retrying', async () => {
    seen.length = 0;
    const res = await add('rejected-token');
    assert.equal(res.code, 1, `stdout ${res.stdout}\nstderr ${res.stderr}`);
    const out = json(res);
    assert.equal(out.code, 11);
    assert.match(String(out.msg), /Unauthorized/);
    assert.ok(seen.length >= 1 && seen.length <= 2, `requests: ${JSON.stringify(seen)}`);
    assert.ok(
      seen.every((r) => r.path === POD_PATH),
      JSON.stringify(seen),
    );
  });

  it('a server its CA did not sign gets no request: code 11 after bounded retries', async () => {
    seen.length = 0;
    // Degraded mode retries for up to 20 s (docs/architecture.md "Degraded mode").
    const res = await add('other-ca', 40_000);
    assert.equal(res.code, 1, `stdout ${res.stdout}\nstderr ${res.stderr}`);
    const out = json(res);
    assert.equal(out.code, 11);
    assert.match(String(out.msg), /certificate/);
    const attempts = Number(/after (\d+) attempt/.exec(String(out.msg))?.[1]);
    assert.ok(attempts >= 2, `bounded retries, not one attempt: ${String(out.msg)}`);
    assert.deepEqual(seen, [], 'no request reached the server');
  });
});
