import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { runDoctor } from '../src/commands/doctor.ts';
import { type DaemonState, doctorExitCode, renderDoctorText } from '../src/doctor/doctorReport.ts';
import { tempDir } from './testHelpers.ts';

const healthyDaemon: DaemonState = {
  backend: 'iptables-nft',
  installer: { ready: true, passes: 1, lastPassAt: '2026-12-01T00:00:00.000Z', lastError: null },
  ambient: { enabled: false, ztunnelConnections: null },
  verification: { intervalSeconds: 60, reportOnly: false },
  agent: true,
  pods: [
    {
      pod: 'default/web',
      mode: 'sidecar',
      status: 'ok',
      drift: [],
      lastVerification: { at: '2026-12-01T00:00:30.000Z', status: 'ok' },
    },
  ],
};

/** A scratch host root laid out as the DaemonSet mounts it, with the plugin installed. */
async function hostRoot(t: TestContext) {
  const dir = await tempDir(t, 'doctor-');
  const paths = {
    source: join(dir, 'image/opt/cni/bin'),
    target: join(dir, 'host/opt/cni/bin'),
    netDir: join(dir, 'host/etc/cni/net.d'),
    runDir: join(dir, 'run'),
  };
  for (const d of Object.values(paths)) mkdirSync(d, { recursive: true });
  writeFileSync(join(paths.source, 'istio-cni'), 'plugin-bytes');
  writeFileSync(join(paths.target, 'istio-cni'), 'plugin-bytes');
  writeFileSync(join(paths.runDir, 'istio-cni-kubeconfig'), 'apiVersion: v1\n');
  writeFileSync(
    join(paths.netDir, '10-primary.conflist'),
    JSON.stringify({ cniVersion: '1.0.0', name: 'k8s', plugins: [{ type: 'bridge' }, { type: 'portmap' }, { type: 'istio-cni' }] }),
  );
  const env = {
    CNI_BIN_SOURCE_DIR: paths.source,
    CNI_BIN_TARGET_DIRS: paths.target,
    MOUNTED_CNI_NET_DIR: paths.netDir,
    CNI_AGENT_RUN_DIR: paths.runDir,
  };
  return { dir, paths, env };
}

/** Answers `POST /v1/doctor` on `<run>/pluginevent.sock` with `state` (the pod filter applied as the daemon does). */
async function fakeDaemon(t: TestContext, runDir: string, state: DaemonState): Promise<{ asked: (string | undefined)[] }> {
  const asked: (string | undefined)[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const pod = (JSON.parse(body || '{}') as { pod?: string }).pod;
      asked.push(pod);
      if (req.url !== '/v1/doctor') return void res.writeHead(404).end();
      const payload = JSON.stringify({ ...state, pods: state.pods.filter((p) => pod === undefined || p.pod === pod) });
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) }).end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(join(runDir, 'pluginevent.sock'), resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { asked };
}

describe('install-cni doctor', () => {
  it('everything agrees: exit 0, the node and every pod listed', async (t) => {
    const h = await hostRoot(t);
    await fakeDaemon(t, h.paths.runDir, healthyDaemon);
    const report = await runDoctor({ env: h.env });
    assert.deepEqual(report.problems, []);
    assert.equal(doctorExitCode(report), 0);
    assert.deepEqual(report.node.binaries, [{ dir: h.paths.target, present: true, identical: true }]);
    assert.deepEqual(report.node.cniConfig, { file: join(h.paths.netDir, '10-primary.conflist'), primary: true, position: 3, plugins: 3 });
    const text = renderDoctorText(report);
    assert.match(text, /istio-cni is plugin 3 of 3/);
    assert.match(text, /default\/web\s+sidecar\s+ok/);
    assert.match(text, /OK: everything agrees/);
  });

  it('a drifted pod, a differing binary, a shadowed conflist and a missing kubeconfig: exit 1, each named', async (t) => {
    const h = await hostRoot(t);
    writeFileSync(join(h.paths.target, 'istio-cni'), 'plugin-bytez');
    writeFileSync(
      join(h.paths.netDir, '05-other.conflist'),
      JSON.stringify({ cniVersion: '1.0.0', name: 'other', plugins: [{ type: 'ptp' }] }),
    );
    const { rmSync } = await import('node:fs');
    rmSync(join(h.paths.runDir, 'istio-cni-kubeconfig'));
    const drifted: DaemonState = {
      ...healthyDaemon,
      pods: [
        {
          ...(healthyDaemon.pods[0] as DaemonState['pods'][number]),
          status: 'drift',
          drift: [{ kind: 'rules_missing', detail: 'ipv4 nat ISTIO_OUTPUT: chain missing' }],
        },
      ],
    };
    await fakeDaemon(t, h.paths.runDir, drifted);
    const report = await runDoctor({ env: h.env });
    assert.equal(doctorExitCode(report), 1);
    assert.deepEqual(report.problems, [
      `plugin binary in ${h.paths.target} differs from the image's: content differs`,
      'the runtime loads 05-other.conflist first, not 10-primary.conflist which names istio-cni',
      `plugin kubeconfig missing: ${join(h.paths.runDir, 'istio-cni-kubeconfig')}`,
      'default/web: rules_missing (ipv4 nat ISTIO_OUTPUT: chain missing)',
    ]);
  });

  it('ambient host probe rules that drifted: exit 1, named with what differs, shown under DAEMON', async (t) => {
    const h = await hostRoot(t);
    const state: DaemonState = {
      ...healthyDaemon,
      ambient: {
        enabled: true,
        ztunnelConnections: 1,
        hostRules: {
          status: 'drift',
          drift: [{ kind: 'host_rules', detail: 'ipv4 nat: missing chain ISTIO_POSTRT' }],
          lastVerification: { at: '2026-12-01T00:00:10.000Z', status: 'drift', action: 'failed' },
        },
      },
    };
    await fakeDaemon(t, h.paths.runDir, state);
    const report = await runDoctor({ env: h.env });
    assert.equal(doctorExitCode(report), 1);
    assert.deepEqual(report.problems, ['ambient host probe rules: ipv4 nat: missing chain ISTIO_POSTRT']);
    assert.match(renderDoctorText(report), /host probe rules: drift, last verified 2026-12-01T00:00:10.000Z \(failed\)/);
  });

  it('one pod asked for is shown in full; an unknown one is a problem', async (t) => {
    const h = await hostRoot(t);
    const daemon = await fakeDaemon(t, h.paths.runDir, healthyDaemon);
    const one = await runDoctor({ env: h.env, pod: 'default/web' });
    assert.equal(doctorExitCode(one), 0);
    assert.deepEqual(daemon.asked, ['default/web']);
    const unknown = await runDoctor({ env: h.env, pod: 'default/nope' });
    assert.equal(doctorExitCode(unknown), 1);
    assert.deepEqual(unknown.problems, ['default/nope: not a pod this agent handles']);
  });

  it('the daemon down: exit 2, the node checks still answered', async (t) => {
    const h = await hostRoot(t);
    const report = await runDoctor({ env: h.env, timeoutMs: 2000 });
    assert.equal(doctorExitCode(report), 2);
    assert.equal(report.daemon.reachable, false);
    assert.equal(report.node.binaries[0]?.identical, true);
    assert.match(renderDoctorText(report), /DAEMON: unreachable/);
  });
});
