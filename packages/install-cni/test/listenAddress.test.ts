import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { startHealthServer } from '../src/health/healthServer.ts';
import { startMetricsServer } from '../src/metrics/metricsServer.ts';
import { resolveSettings, SettingsError } from '../src/settings/index.ts';
import { captureLogger } from './testHelpers.ts';

const host = { hostname: () => 'n' };

/** The HTTP status of GET `url`, or the connection error's code. */
async function reach(url: string): Promise<number | string> {
  try {
    return (await fetch(url)).status;
  } catch (err) {
    return ((err as { cause?: { code?: string } }).cause?.code ?? String(err)) as string;
  }
}

describe('health and metrics listen addresses', () => {
  it('default to every address, as upstream; accept IPv4 and IPv6 literals', () => {
    const d = resolveSettings({}, {}, host);
    assert.equal(d.readinessAddress, '');
    assert.equal(d.monitoringAddress, '');
    const s = resolveSettings({}, { READINESS_ADDRESS: '10.0.0.7', MONITORING_ADDRESS: ' ::1 ' }, host);
    assert.equal(s.readinessAddress, '10.0.0.7');
    assert.equal(s.monitoringAddress, '::1');
  });

  it('reject anything but an IP literal, naming the setting and the value', () => {
    assert.throws(
      () => resolveSettings({}, { READINESS_ADDRESS: 'node-1.example', MONITORING_ADDRESS: '10.0.0.1;x' }, host),
      (err: unknown) => {
        assert.ok(err instanceof SettingsError);
        assert.match(err.message, /READINESS_ADDRESS "node-1\.example": want an IP address/);
        assert.match(err.message, /MONITORING_ADDRESS "10\.0\.0\.1;x": want an IP address/);
        return true;
      },
    );
  });

  it('a server bound to 127.0.0.1 answers there and refuses 127.0.0.2 (another address of the same node)', async (t) => {
    const health = await startHealthServer(0, () => true, '127.0.0.1');
    t.after(() => health.close());
    const metrics = await startMetricsServer(0, new Registry(), captureLogger().logger, '127.0.0.1');
    t.after(() => metrics.close());
    assert.equal(await reach(`http://127.0.0.1:${health.port}/readyz`), 200);
    assert.equal(await reach(`http://127.0.0.1:${metrics.port}/metrics`), 200);
    assert.equal(await reach(`http://127.0.0.2:${health.port}/readyz`), 'ECONNREFUSED');
    assert.equal(await reach(`http://127.0.0.2:${metrics.port}/metrics`), 'ECONNREFUSED');
  });

  it('without an address, every address answers', async (t) => {
    const health = await startHealthServer(0, () => true);
    t.after(() => health.close());
    assert.equal(await reach(`http://127.0.0.2:${health.port}/healthz`), 200);
  });
});
