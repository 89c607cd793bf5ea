import { after, before } from 'node:test';
import { namespaceObject } from './meshPods.ts';
import { startAgentRig, type AgentRig } from './startAgentRig.ts';

/**
 * For the describe block it is called in: an agent rig verifying every second (plus `env`), with
 * the `default` namespace, started before its tests and closed after them. Returns the rig's getter.
 */
export function verifyingRig(env: Record<string, string>): () => AgentRig {
  let rig: AgentRig | undefined;
  before(async () => {
    rig = await startAgentRig({ VERIFY_INTERVAL: '1s', ...env });
    rig.api.upsertNamespace(namespaceObject('default'));
  });
  after(async () => {
    await rig?.close();
  });
  return () => {
    if (rig === undefined) throw new Error('the rig did not start');
    return rig;
  };
}
