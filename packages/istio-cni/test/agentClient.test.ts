import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { PROTOCOL, type HandoffRequest } from '@istio-cni/handoff';
import { AgentUnreachableError, udsAgentClient } from '../src/agentClient.ts';

const dir = mkdtempSync(join(tmpdir(), 'agent-client-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const request: HandoffRequest = {
  protocol: PROTOCOL,
  command: 'ADD',
  cniVersion: '1.0.0',
  containerId: 'c',
  netns: '/x',
  ifName: 'eth0',
  pod: { name: 'p', namespace: 'n', uid: '', infraContainerId: '' },
  ips: [],
};

async function agentThat(onConnection: (socket: import('node:net').Socket) => void): Promise<string> {
  const server = createServer(onConnection);
  await new Promise<void>((r) => server.listen(join(dir, 'pluginevent.sock'), r));
  after(() => server.close());
  return dir;
}

describe('udsAgentClient', () => {
  it('reports an agent that dies mid-request (connection closed, no answer) as unreachable', async () => {
    const runDir = await agentThat((socket) => socket.once('data', () => socket.destroy()));
    await assert.rejects(udsAgentClient(runDir, 2000).call(request), AgentUnreachableError);
  });

  it('reports a missing socket as unreachable', async () => {
    await assert.rejects(udsAgentClient(join(dir, 'nowhere'), 2000).call(request), AgentUnreachableError);
  });
});
