import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { repairFieldSelector } from '../src/repair/watchRepairPods.ts';
import { startRepairController } from '../src/repair/startRepairController.ts';
import { resolveSettings } from '../src/settings/settings.ts';
import { startNodeTaintRemover } from '../src/taint/startNodeTaintRemover.ts';
import { captureLogger } from './testHelpers.ts';

const settings = (env: Record<string, string>) => resolveSettings({}, env, { hostname: () => 'host-a' });

describe('starting the repair controller', () => {
  it('the node is always appended to the field selector', () => {
    assert.equal(repairFieldSelector('', 'node-a'), 'spec.nodeName=node-a');
    assert.equal(repairFieldSelector('status.phase=Pending', 'node-a'), 'status.phase=Pending,spec.nodeName=node-a');
  });

  it('is not started when disabled, without a mode, or without API access (and says why)', () => {
    const { logger, lines } = captureLogger();
    const registry = new Registry();
    assert.equal(startRepairController({ settings: settings({ REPAIR_ENABLED: 'false', REPAIR_REPAIR_PODS: 'true' }), logger, registry }), undefined);
    assert.equal(startRepairController({ settings: settings({}), logger, registry }), undefined);
    assert.match(String(lines.at(-1)?.msg), /all off: not started/);
    assert.equal(startRepairController({ settings: settings({ REPAIR_DELETE_PODS: 'true' }), logger, registry }), undefined);
    assert.equal(lines.at(-1)?.msg, 'no Kubernetes API configured: repair controller not started');
    assert.equal(lines.at(-1)?.component, 'repair');
  });

  it('the taint remover is off by default and needs API access', () => {
    const { logger, lines } = captureLogger();
    assert.equal(startNodeTaintRemover({ settings: settings({}), logger }), undefined);
    assert.equal(lines.length, 0);
    assert.equal(startNodeTaintRemover({ settings: settings({ NODE_TAINT_ENABLED: 'true' }), logger }), undefined);
    assert.equal(lines.at(-1)?.msg, 'no Kubernetes API configured: the node readiness taint cannot be removed');
  });
});
