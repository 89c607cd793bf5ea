/**
 * Produces the daemon's warmed V8 code cache: runs the bundle (under the executable's own runtime
 * flags) as a daemon on a scratch node until `/readyz` answers 200 and its pod informer is watching
 * — plugin copied, kubeconfig and CNI config written, servers listening, the agent's and the repair
 * controller's informer synced from a stand-in API server (one pod of this node, outside the mesh)
 * — then updates that pod, lets the daemon settle, and takes the code cache V8 has then (SIGUSR2 to
 * the warm-up runner), before stopping it. Each start then finds the functions of that path
 * compiled; SEA's own code cache, made before anything runs, has only the bundle's top level.
 *
 * Which functions have run must not depend on timing, or the cache's bytes change from build to
 * build (see scripts/build.ts on reproducible builds). Found with V8's --log-function-events:
 * an API server that is not there made the client's retry path run in some builds only; a
 * handler registered while its informer was still listing saw the pod as an event or not (the
 * update after start-up now runs every handler); the stop's own API requests (upgrade check)
 * finished before exit or not (the cache is now taken before the stop); the daemon's first writes
 * set off a further pass a stop could land in (the settle).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeKubeApi } from '../../test/support/fakeKubeApi.ts';

const NODE_NAME = 'warm-node';
const SETTLE_MS = 1000;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function readyz(port: number): Promise<number> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) })).status;
  } catch {
    return 0;
  }
}

export async function warmDaemonCodeCache(
  nodeBinary: string,
  nodeFlags: readonly string[],
  bundleFile: string,
  cacheFile: string,
): Promise<void> {
  // The build dir outlives a build: the wait below must not take the last build's cache for this one's.
  rmSync(cacheFile, { force: true });
  const root = mkdtempSync(join(tmpdir(), 'install-cni-warm-'));
  const dir = (...parts: string[]) => {
    const path = join(root, ...parts);
    mkdirSync(path, { recursive: true });
    return path;
  };
  const image = dir('image');
  const sa = dir('serviceaccount');
  const netDir = dir('net.d');
  writeFileSync(join(image, 'istio-cni'), '#!/bin/sh\n', { mode: 0o755 });
  writeFileSync(join(sa, 'token'), 'warm-up');
  writeFileSync(join(sa, 'ca.crt'), 'warm-up');
  writeFileSync(join(netDir, '10-bridge.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'warm', plugins: [{ type: 'bridge' }] }));
  const readinessPort = await freePort();
  const api = await startFakeKubeApi({ token: 'warm-up' });
  api.upsertNamespace({ metadata: { name: 'default' } });
  const pod = (labels: Record<string, string>) => ({
    metadata: { name: 'warmup-0', namespace: 'default', uid: 'u', labels },
    spec: { nodeName: NODE_NAME, containers: [{ name: 'app', image: 'app' }] },
    status: { phase: 'Running', podIP: '10.0.0.5', podIPs: [{ ip: '10.0.0.5' }] },
  });
  api.upsertPod(pod({ app: 'warmup' }));
  const kubeconfig = join(root, 'kubeconfig');
  api.writeKubeconfig(kubeconfig);
  // The last things start-up logs, once the informer has listed (the repair controller's comes after).
  const lastStartupLogs = ['informers synced', 'repair controller started'];
  try {
    const child = spawn(nodeBinary, [...nodeFlags, join(import.meta.dirname, 'warmCodeCache.cjs'), bundleFile, cacheFile], {
      env: {
        PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
        CNI_BIN_SOURCE_DIR: image,
        CNI_BIN_TARGET_DIRS: dir('host-bin'),
        MOUNTED_CNI_NET_DIR: netDir,
        CNI_AGENT_RUN_DIR: dir('run'),
        SERVICE_ACCOUNT_DIR: sa,
        KUBECONFIG: kubeconfig,
        KUBERNETES_SERVICE_HOST: '127.0.0.1',
        KUBERNETES_SERVICE_PORT: new URL(api.url).port,
        KUBERNETES_NODE_NAME: NODE_NAME,
        READINESS_PORT: String(readinessPort),
        MONITORING_PORT: '0',
        CHAINED_CNI_PLUGIN: 'true',
        REPAIR_ENABLED: 'true',
        REPAIR_LABEL_PODS: 'true',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let log = '';
    child.stdout.on('data', (chunk: Buffer) => (log += chunk.toString()));
    const startedUp = () => lastStartupLogs.every((msg) => log.includes(`"msg":${JSON.stringify(msg)}`));
    const closed = new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', resolve);
    });
    const deadline = Date.now() + 60_000;
    // /readyz is asked from the start, so every build sees it refuse and answer 503 before 200: the
    // paths that run must not depend on whether start-up was already over at the first question.
    while ((await readyz(readinessPort)) !== 200 || !startedUp()) {
      if (child.exitCode !== null || Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`daemon code-cache warm-up never became ready (exit ${child.exitCode}):\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    // Whether an informer handler saw the pod as an event or in its first listing depends on which
    // came first: an update after start-up runs every handler in every build.
    api.upsertPod(pod({ app: 'warmup', warmed: 'true' }));
    // Let the passes the daemon's own first writes set off (its directory watches see them) and the
    // update's handlers run out before the cache is taken.
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    child.kill('SIGUSR2');
    while (!existsSync(cacheFile)) {
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`daemon code-cache warm-up wrote no cache (exit ${child.exitCode})`);
      await new Promise((r) => setTimeout(r, 20));
    }
    child.kill('SIGTERM');
    const code = await closed;
    if (code !== 0) throw new Error(`daemon code-cache warm-up exited ${code}`);
    if (statSync(cacheFile).size === 0) throw new Error('daemon code-cache warm-up wrote an empty cache');
  } finally {
    await api.close();
    rmSync(root, { recursive: true, force: true });
  }
}
