/**
 * Produces the plugin's warmed V8 code cache: runs the bundle as the runtime would for two ADDs in
 * one process, one answered by a stand-in agent on a scratch socket and one in degraded mode (no
 * agent; the installer's kubeconfig and a stand-in API server answering with a pod outside the
 * mesh), and keeps the code cache V8 has at exit. The executable's loader compiles the bundle with
 * it, so the functions on both ADD paths start compiled.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildKubeconfig } from '../../packages/install-cni/src/installer/kubeconfig.ts';

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

function netconf(runDir: string): string {
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    type: 'istio-cni',
    cni_agent_run_dir: runDir,
    plugin_log_level: 'info',
    exclude_namespaces: ['kube-system'],
    pod_namespace: 'istio-system',
    prevResult: {
      cniVersion: '1.0.0',
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

export async function warmPluginCodeCache(
  nodeBinary: string,
  nodeFlags: readonly string[],
  bundleFile: string,
  cacheFile: string,
): Promise<void> {
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
    const plan = [agentRunDir, degradedRunDir].map((runDir) => {
      const stdin = join(runDir, 'netconf.json');
      writeFileSync(stdin, netconf(runDir));
      return { env: ADD_ENV, stdin };
    });
    const planFile = join(dir, 'plan.json');
    writeFileSync(planFile, JSON.stringify(plan));
    // The degraded run logs (agent unreachable): shown only if the warm-up fails.
    let stderr = '';
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(nodeBinary, [...nodeFlags, join(import.meta.dirname, 'warmCodeCache.cjs'), bundleFile, cacheFile, planFile], {
        env: ADD_ENV,
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', reject);
      child.on('close', resolve);
    });
    if (code !== 0) throw new Error(`code-cache warm-up run exited ${code}: ${stderr}`);
    if (!stderr.includes('pod handled in degraded mode')) throw new Error(`the degraded warm-up ADD did not run: ${stderr}`);
    if (statSync(cacheFile).size === 0) throw new Error('code-cache warm-up wrote an empty cache');
  } finally {
    agent.close();
    api.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
