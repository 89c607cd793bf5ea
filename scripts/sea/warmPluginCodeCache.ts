/**
 * Produces the plugin's warmed V8 code cache: runs the bundle once as the runtime would for an
 * ADD (a netconf with prevResult, answered by a stand-in agent on a scratch socket), and keeps the
 * code cache V8 has at exit. The executable's loader compiles the bundle with it, so the functions
 * on the ADD path start compiled.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function warmPluginCodeCache(nodeBinary: string, bundleFile: string, cacheFile: string): Promise<void> {
  const runDir = mkdtempSync(join(tmpdir(), 'istio-cni-warm-'));
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({ protocol: 1, verdict: 'skipped', reason: 'build-time warm-up' });
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(join(runDir, 'pluginevent.sock'), resolve));
  try {
    const conf = JSON.stringify({
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
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(nodeBinary, [join(import.meta.dirname, 'warmCodeCache.cjs'), bundleFile, cacheFile], {
        env: {
          PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: 'warmup',
          CNI_NETNS: '/var/run/netns/warm',
          CNI_IFNAME: 'eth0',
          CNI_PATH: '/opt/cni/bin',
          CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=warmup-0;K8S_POD_UID=u',
        },
        stdio: ['pipe', 'ignore', 'inherit'],
      });
      child.on('error', reject);
      child.on('close', resolve);
      child.stdin.end(conf);
    });
    if (code !== 0) throw new Error(`code-cache warm-up run exited ${code}`);
    if (statSync(cacheFile).size === 0) throw new Error('code-cache warm-up wrote an empty cache');
  } finally {
    server.close();
    rmSync(runDir, { recursive: true, force: true });
  }
}
