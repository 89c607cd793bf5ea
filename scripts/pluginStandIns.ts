/**
 * The plugin's build-time runs (the Node SEA's code-cache warm-up, the Bun build's bytecode order):
 * a stand-in agent on a scratch socket answering every hand-off, and a stand-in API server behind
 * the installer's kubeconfig answering with a pod outside the mesh, for degraded mode.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildKubeconfig } from '../packages/install-cni/src/installer/kubeconfig.ts';

/** One exec of the plugin: its environment, and the file its stdin reads. */
export interface PluginRun {
  label: string;
  env: Record<string, string>;
  stdin: string;
  /** A successful run of this kind writes this to stderr (the degraded ADD's log line). */
  stderrIncludes?: string;
}

export interface PluginRuns {
  /** ADD of a pod outside the mesh answered by the agent: the path every pod sandbox takes. */
  agentAdd: PluginRun;
  /** STATUS (CNI 1.1) and DEL answered by the agent: every few seconds, and every pod's removal. */
  agentStatus: PluginRun;
  agentDel: PluginRun;
  version: PluginRun;
  /** ADD with no agent: degraded mode reads the pod from the stand-in API server and passes it through. */
  degradedAdd: PluginRun;
}

function json(body: unknown): RequestListener {
  return (req, res) => {
    req.resume();
    req.on('end', () => {
      const text = JSON.stringify(body);
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
      res.end(text);
    });
  };
}

function listen(server: Server, where: string | number): Promise<void> {
  return new Promise((resolve) => {
    if (typeof where === 'string') server.listen(where, resolve);
    else server.listen(where, '127.0.0.1', resolve);
  });
}

function netconf(runDir: string, cniVersion: string): string {
  return JSON.stringify({
    cniVersion,
    name: 'k8s-pod-network',
    type: 'istio-cni',
    cni_agent_run_dir: runDir,
    plugin_log_level: 'info',
    exclude_namespaces: ['kube-system'],
    pod_namespace: 'istio-system',
    prevResult: {
      cniVersion,
      interfaces: [{ name: 'eth0', mac: '02:00:00:00:00:01', sandbox: '/var/run/netns/warm' }],
      ips: [{ address: '10.0.0.5/24', gateway: '10.0.0.1', interface: 0 }],
      routes: [{ dst: '0.0.0.0/0' }],
      dns: {},
    },
  });
}

const ADD_ENV = {
  PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'warmup',
  CNI_NETNS: '/var/run/netns/warm',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=warmup-0;K8S_POD_UID=u',
};

/** A pod outside the mesh, with the fields a real one has that the decision looks at. */
const PLAIN_POD = {
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: {
    name: 'warmup-0',
    namespace: 'default',
    uid: 'u',
    labels: { app: 'warmup' },
    annotations: { 'kubectl.kubernetes.io/restartedAt': 'x' },
  },
  spec: { nodeName: 'node', containers: [{ name: 'app', image: 'app', ports: [{ containerPort: 8080 }] }] },
  status: { phase: 'Pending', podIP: '10.0.0.5', podIPs: [{ ip: '10.0.0.5' }] },
};

/** Runs `use` with the stand-ins listening and the runs' stdin files written; removes them after. */
export async function withPluginStandIns<T>(use: (runs: PluginRuns) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-warm-'));
  const agentRunDir = join(dir, 'agent');
  const degradedRunDir = join(dir, 'degraded');
  mkdirSync(agentRunDir);
  mkdirSync(degradedRunDir);
  const agent = createServer(json({ protocol: 1, verdict: 'skipped', reason: 'build-time warm-up' }));
  const api = createServer(json(PLAIN_POD));
  await listen(agent, join(agentRunDir, 'pluginevent.sock'));
  await listen(api, 0);
  try {
    writeFileSync(
      join(degradedRunDir, 'istio-cni-kubeconfig'),
      buildKubeconfig({
        k8sServiceProtocol: 'http',
        k8sServiceHost: '127.0.0.1',
        k8sServicePort: String((api.address() as AddressInfo).port),
        skipTlsVerify: true,
        token: 'build-time-warm-up',
      }),
    );
    const stdin = (name: string, text: string) => {
      const file = join(dir, `${name}.json`);
      writeFileSync(file, text);
      return file;
    };
    const agentConf = stdin('agent', netconf(agentRunDir, '1.0.0'));
    return await use({
      agentAdd: { label: 'ADD answered by the agent', env: ADD_ENV, stdin: agentConf },
      agentStatus: {
        label: 'STATUS answered by the agent',
        env: { ...ADD_ENV, CNI_COMMAND: 'STATUS' },
        stdin: stdin('status', netconf(agentRunDir, '1.1.0')),
      },
      agentDel: { label: 'DEL answered by the agent', env: { ...ADD_ENV, CNI_COMMAND: 'DEL' }, stdin: agentConf },
      version: { label: 'VERSION', env: { PATH: ADD_ENV.PATH, CNI_COMMAND: 'VERSION' }, stdin: stdin('version', '{"cniVersion":"1.1.0"}') },
      degradedAdd: {
        label: 'degraded ADD',
        env: ADD_ENV,
        stdin: stdin('degraded', netconf(degradedRunDir, '1.0.0')),
        stderrIncludes: 'pod handled in degraded mode',
      },
    });
  } finally {
    agent.close();
    api.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
