import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startFakeZtunnel, type FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import type { ControlPlane } from './controlPlane.ts';
import { describeNamespace } from './localCluster.ts';
import { nodePrivateDir, type RunningNode } from './node.ts';
import { waitFor } from './workloads.ts';

/**
 * A fake ztunnel (test/support/fakeZtunnel.ts) connected to the ZDS socket of the node's agent (in
 * the node's own /run/ztunnel), retried until the agent answers on it.
 */
export function connectFakeZtunnel(controlPlane: ControlPlane, node: RunningNode): Promise<FakeZtunnel> {
  const path = join(nodePrivateDir(node.layout, '/run/ztunnel'), 'ztunnel.sock');
  return waitFor(
    `${node.layout.name}: a ZDS connection to ${path}`,
    async () => (existsSync(path) ? startFakeZtunnel({ path }).catch(() => undefined) : undefined),
    120_000,
    () => describeNamespace(controlPlane, RELEASE_NAMESPACE),
  );
}
