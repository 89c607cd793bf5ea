import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniError, dispatch, parseNetConf, type CmdArgs } from '@istio-cni/cni';
import { createJsonLogger, parsePluginConfig, type HandoffRequest, type HandoffResponse } from '@istio-cni/handoff';
import { AgentUnreachableError, type AgentClient } from '../src/agentClient.ts';
import { createPluginFuncs, skipReason, type DegradedRunner } from '../src/commands.ts';

const logger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

function fakeAgent(answer: HandoffResponse | Error): AgentClient & { requests: HandoffRequest[] } {
  const requests: HandoffRequest[] = [];
  return {
    requests,
    async call(request) {
      requests.push(request);
      if (answer instanceof Error) throw answer;
      return answer;
    },
  };
}

/** A degraded runner that only answers STATUS (recording the network asked about). */
function degradedStatusOnly(asked: string[], answer: string | undefined): DegradedRunner {
  const unused = () => Promise.reject(new Error('not expected in this test'));
  return {
    add: unused,
    check: unused,
    async status(config) {
      asked.push(config.cniAgentRunDir);
      return answer;
    },
  };
}

function args(command: CmdArgs['command'], cniArgs: string): CmdArgs {
  return {
    command,
    containerId: 'c1',
    netns: '/var/run/netns/p1',
    ifName: 'eth0',
    args: cniArgs,
    path: ['/opt/cni/bin'],
    stdin: Buffer.alloc(0),
    netnsOverride: '',
  };
}

const podArgs = 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=uid-1;K8S_POD_INFRA_CONTAINER_ID=c1';
const prevResult = {
  cniVersion: '1.0.0',
  interfaces: [{ name: 'eth0', sandbox: '/var/run/netns/p1' }],
  ips: [{ address: '10.0.0.5/24', gateway: '10.0.0.1', interface: 0 }],
  dns: {},
};

function confText(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    type: 'istio-cni',
    cni_agent_run_dir: '/run/x',
    pod_namespace: 'istio-system',
    exclude_namespaces: ['kube-system'],
    ...extra,
  });
}

function conf(extra: Record<string, unknown> = {}) {
  return parseNetConf(confText(extra));
}

describe('skipReason (upstream CmdAdd local steps)', () => {
  const config = parsePluginConfig(conf());
  const k8s = (podNamespace: string, podName: string) => ({ podNamespace, podName, podUid: '', podInfraContainerId: '' });
  const cases: [string, string, string | undefined][] = [
    ['istio-system', 'istio-cni-node-abcde', 'istio-cni agent pod'],
    ['other', 'istio-cni-node-abcde', undefined],
    ['istio-system', 'istio-cni-nodes', undefined],
    ['', 'web-0', 'not a kubernetes pod'],
    ['default', '', 'not a kubernetes pod'],
    ['kube-system', 'coredns', 'excluded namespace'],
    ['default', 'web-0', undefined],
  ];
  for (const [ns, name, want] of cases) {
    it(`${ns}/${name} → ${want ?? 'ask the agent'}`, () => {
      assert.equal(skipReason(k8s(ns, name), config), want);
    });
  }

  it('recognises the agent pod before the excluded-namespace check', () => {
    const c = parsePluginConfig(conf({ exclude_namespaces: ['istio-system'] }));
    assert.equal(skipReason(k8s('istio-system', 'istio-cni-node-x'), c), 'istio-cni agent pod');
  });
});

describe('createPluginFuncs', () => {
  it('ADD hands off the pod, its IPs and netns, then passes prevResult through', async () => {
    const agent = fakeAgent({ protocol: 1, verdict: 'redirected' });
    const funcs = createPluginFuncs({ logger, agentFor: () => agent });
    const out = await funcs.add(args('ADD', podArgs), conf({ prevResult }));
    assert.deepEqual(out, prevResult);
    assert.equal(agent.requests.length, 1);
    const r = agent.requests[0] as HandoffRequest;
    assert.equal(r.command, 'ADD');
    assert.equal(r.netns, '/var/run/netns/p1');
    assert.deepEqual(r.pod, { name: 'web-0', namespace: 'default', uid: 'uid-1', infraContainerId: 'c1' });
    assert.deepEqual(r.ips, [{ address: '10.0.0.5/24', gateway: '10.0.0.1', interface: 0 }]);
  });

  it('ADD skips locally without contacting the agent for an excluded namespace', async () => {
    const agent = fakeAgent(new Error('must not be called'));
    const funcs = createPluginFuncs({ logger, agentFor: () => agent });
    await funcs.add(args('ADD', 'K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=dns;IgnoreUnknown=1'), conf({ prevResult }));
    assert.equal(agent.requests.length, 0);
  });

  it('ADD returns the agent CNI error unchanged', async () => {
    const agent = fakeAgent({ protocol: 1, error: { code: 11, msg: 'no ztunnel connection', details: 'd' } });
    const funcs = createPluginFuncs({ logger, agentFor: () => agent });
    await assert.rejects(funcs.add(args('ADD', podArgs), conf()), (err: unknown) => {
      return err instanceof CniError && err.code === 11 && err.message === 'no ztunnel connection' && err.details === 'd';
    });
  });

  it('ADD fails with code 11 when the agent is unreachable', async () => {
    const funcs = createPluginFuncs({ logger, agentFor: () => fakeAgent(new AgentUnreachableError('ENOENT')) });
    await assert.rejects(funcs.add(args('ADD', podArgs), conf()), (err: unknown) => err instanceof CniError && err.code === 11);
  });

  it('DEL succeeds even when the agent fails or is unreachable', async () => {
    for (const answer of [new AgentUnreachableError('gone'), new Error('protocol fault')]) {
      const agent = fakeAgent(answer);
      const lines: string[] = [];
      const warnLogger = createJsonLogger({ scope: 'test', threshold: 'warn', sink: (line) => lines.push(line) });
      const funcs = createPluginFuncs({ logger: warnLogger, agentFor: () => agent });
      const env = {
        CNI_COMMAND: 'DEL',
        CNI_CONTAINERID: 'c1',
        CNI_NETNS: '/var/run/netns/p1',
        CNI_IFNAME: 'eth0',
        CNI_PATH: '/opt/cni/bin',
        CNI_ARGS: podArgs,
      };
      // A successful DEL prints nothing (CNI spec) and exits 0.
      assert.deepEqual(await dispatch(env, Buffer.from(confText()), funcs, ''), { stdout: '', stderr: '', exitCode: 0 });
      assert.deepEqual(
        agent.requests.map((r) => r.command),
        ['DEL'],
      );
      assert.equal(lines.length, 1, lines.join(''));
      const line = JSON.parse(lines[0] ?? '') as { level: string; msg: string; error: string };
      assert.deepEqual([line.level, line.msg, line.error], ['warn', 'DEL not acknowledged by agent; ignoring', answer.message]);
    }
  });

  it('STATUS is 0 when the agent is unreachable (kubelet must be able to start it), without asking degraded mode', async () => {
    const asked: string[] = [];
    const down = createPluginFuncs({
      logger,
      agentFor: () => fakeAgent(new AgentUnreachableError('gone')),
      degraded: degradedStatusOnly(asked, 'kubeconfig missing'),
    });
    await down.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' }));
    assert.deepEqual(asked, []);
    const noDegraded = createPluginFuncs({ logger, agentFor: () => fakeAgent(new AgentUnreachableError('gone')) });
    await noDegraded.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' }));
  });

  it('STATUS is 50 when the agent is not ready and there is no degraded mode', async () => {
    const notReady = createPluginFuncs({
      logger,
      agentFor: () => fakeAgent({ protocol: 1, error: { code: 50, msg: 'watches not synced' } }),
    });
    await assert.rejects(
      notReady.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' })),
      (e: unknown) => e instanceof CniError && e.code === 50 && /not ready: watches not synced/.test(e.message),
    );
  });

  it('STATUS is 0 with the agent ready, without asking degraded mode', async () => {
    const asked: string[] = [];
    const funcs = createPluginFuncs({
      logger,
      agentFor: () => fakeAgent({ protocol: 1, verdict: 'ok' }),
      degraded: degradedStatusOnly(asked, 'never asked'),
    });
    await funcs.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' }));
    assert.deepEqual(asked, []);
  });

  it('STATUS with the agent not ready follows whether degraded mode could decide pods', async () => {
    for (const agent of [{ protocol: 1, error: { code: 50, msg: 'pod watch not synced yet' } }] as const) {
      const asked: string[] = [];
      const able = createPluginFuncs({ logger, agentFor: () => fakeAgent(agent), degraded: degradedStatusOnly(asked, undefined) });
      await able.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' }));
      assert.deepEqual(asked, ['/run/x']);
      const unable = createPluginFuncs({
        logger,
        agentFor: () => fakeAgent(agent),
        degraded: degradedStatusOnly([], 'kubeconfig missing'),
      });
      await assert.rejects(
        unable.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' })),
        (e: unknown) =>
          e instanceof CniError && e.code === 50 && /istio-cni node agent is not ready.*; kubeconfig missing$/.test(e.message),
      );
    }
  });

  it('STATUS passes any other agent error through unchanged', async () => {
    const funcs = createPluginFuncs({
      logger,
      agentFor: () => fakeAgent({ protocol: 1, error: { code: 999, msg: 'boom' } }),
      degraded: degradedStatusOnly([], undefined),
    });
    await assert.rejects(
      funcs.status(args('STATUS', ''), conf({ cniVersion: '1.1.0' })),
      (e: unknown) => e instanceof CniError && e.code === 999 && e.message === 'boom',
    );
  });

  it('GC sends the valid attachments to the agent', async () => {
    const agent = fakeAgent({ protocol: 1, verdict: 'ok' });
    const funcs = createPluginFuncs({ logger, agentFor: () => agent });
    await funcs.gc(args('GC', ''), conf({ cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 'a', ifname: 'eth0' }] }));
    assert.deepEqual(agent.requests[0]?.validAttachments, [{ containerId: 'a', ifName: 'eth0' }]);
  });
});
