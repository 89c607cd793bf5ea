import type { HandoffHandler } from './handoffServer.ts';

/**
 * The agent's answer before it makes decisions: every pod is passed through untouched, and the
 * agent reports itself ready. The node-agent work replaces it with real decisions.
 */
export const skipAllHandler: HandoffHandler = async (request) => {
  switch (request.command) {
    case 'ADD':
      return { protocol: request.protocol, verdict: 'skipped', reason: 'agent makes no capture decisions yet' };
    default:
      return { protocol: request.protocol, verdict: 'ok' };
  }
};
