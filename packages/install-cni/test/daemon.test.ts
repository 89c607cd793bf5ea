import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runDaemon } from '../src/daemon.ts';
import type { Installer } from '../src/installer/installer.ts';
import type { DaemonSetLookup } from '../src/installer/upgradeSafety.ts';
import { resolveSettings } from '../src/settings/settings.ts';
import { captureLogger, daemonTestEnv as env, scratchHost, seedOrdered, waitFor } from './testHelpers.ts';

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** The upgrade check's answer: `helm uninstall` (DaemonSet gone) or a rollout (still there, targeting the node). */
const uninstall: DaemonSetLookup = { lookup: async () => ({ kind: 'not-found' }) };
const rollout: DaemonSetLookup = { lookup: async () => ({ kind: 'present', deleting: false, targetsThisNode: true }) };

describe('daemon', () => {
  it('starts metrics, log sink, health and hand-off before installing; ready; cleans up on shutdown when uninstalled', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const before = await readFile(join(host.netDir, '00-calico.conflist'));
    const metricsPort = await freePort();
    const settings = resolveSettings({}, env(host, { MONITORING_PORT: String(metricsPort) }), { hostname: () => 'n' });
    const log = captureLogger();
    const controller = new AbortController();
    let started: { readinessPort: number; installer: Installer } | undefined;
    const order: string[] = [];
    const running = runDaemon(
      {
        settings,
        logger: log.logger,
        pluginLogSink: () => undefined,
        upgradeLookup: uninstall,
        onStarted: (info) => {
          started = info;
          // The hand-off socket exists before the plugin is installed (as upstream).
          order.push(existsSync(join(host.runDir, 'pluginevent.sock')) ? 'handoff' : 'no-handoff');
          order.push(existsSync(join(host.binDir, 'istio-cni')) ? 'plugin' : 'no-plugin');
        },
      },
      controller.signal,
    );
    t.after(() => controller.abort());
    const info = await waitFor('started', () => started);
    assert.deepEqual(order, ['handoff', 'no-plugin']);
    const base = `http://127.0.0.1:${info.readinessPort}`;
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    await waitFor('readyz 200', async () => ((await fetch(`${base}/readyz`)).status === 200 ? true : undefined));
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    assert.match(metrics, /^istio_cni_installs_total\{result="SUCCESS"\} 1$/m);
    assert.match(metrics, /^istio_cni_install_ready 1$/m);
    for (const sock of ['log.sock', 'pluginevent.sock']) assert.equal((await stat(join(host.runDir, sock))).mode & 0o777, 0o600);
    controller.abort('SIGTERM');
    await running;
    assert.deepEqual(await readFile(join(host.netDir, '00-calico.conflist')), before);
    assert.equal(existsSync(join(host.binDir, 'istio-cni')), false);
    assert.equal(existsSync(join(host.runDir, 'istio-cni-kubeconfig')), false);
    assert.equal(existsSync(join(host.runDir, 'log.sock')), false);
  });

  it('sidecar mode, a DaemonSet rollout: shutdown leaves the plugin, its conflist entry and kubeconfig', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const settings = resolveSettings({}, env(host, { MONITORING_PORT: '0' }), { hostname: () => 'n' });
    assert.equal(settings.ambientEnabled, false);
    const controller = new AbortController();
    let started: { readinessPort: number } | undefined;
    const running = runDaemon(
      { settings, logger: captureLogger().logger, pluginLogSink: () => undefined, upgradeLookup: rollout, onStarted: (i) => (started = i) },
      controller.signal,
    );
    t.after(() => controller.abort());
    const info = await waitFor('started', () => started);
    const readyz = `http://127.0.0.1:${info.readinessPort}/readyz`;
    await waitFor('readyz 200', async () => ((await fetch(readyz)).status === 200 ? true : undefined));
    const chained = await readFile(join(host.netDir, '00-calico.conflist'), 'utf8');
    assert.match(chained, /"type": ?"istio-cni"/);
    controller.abort('SIGTERM');
    await running;
    assert.equal(await readFile(join(host.netDir, '00-calico.conflist'), 'utf8'), chained);
    assert.equal(existsSync(join(host.binDir, 'istio-cni')), true);
    assert.equal(existsSync(join(host.runDir, 'istio-cni-kubeconfig')), true);
    // The hand-over file tells the plugin's STATUS a successor is on the way; the successor removes it once ready.
    assert.equal((await stat(join(host.runDir, 'upgrade-handover'))).mode & 0o777, 0o600);
    const successor = new AbortController();
    let restarted: { readinessPort: number } | undefined;
    const second = runDaemon(
      {
        settings,
        logger: captureLogger().logger,
        pluginLogSink: () => undefined,
        upgradeLookup: uninstall,
        onStarted: (i) => (restarted = i),
      },
      successor.signal,
    );
    t.after(() => successor.abort());
    const again = await waitFor('restarted', () => restarted);
    await waitFor('readyz 200', async () =>
      (await fetch(`http://127.0.0.1:${again.readinessPort}/readyz`)).status === 200 ? true : undefined,
    );
    await waitFor('hand-over file removed', async () => (existsSync(join(host.runDir, 'upgrade-handover')) ? undefined : true));
    successor.abort('SIGTERM');
    await second;
    assert.equal(existsSync(join(host.runDir, 'upgrade-handover')), false, 'an uninstall leaves no hand-over file');
  });

  it('a fatal first pass stops the daemon after cleaning up what it installed', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const settings = resolveSettings({}, env(host, { KUBERNETES_SERVICE_HOST: '', MONITORING_PORT: '0' }), { hostname: () => 'n' });
    await assert.rejects(
      runDaemon({ settings, logger: captureLogger().logger }, new AbortController().signal),
      /KUBERNETES_SERVICE_HOST not set/,
    );
    assert.equal(existsSync(join(host.binDir, 'istio-cni')), false);
  });
});
