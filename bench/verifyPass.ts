/**
 * Cost of continuous verification: one pass over 110 sidecar pods (the kubelet's default pod
 * limit), each a real netns holding the default sidecar rules, checked through the agent's own
 * `SidecarCaptureManager.inspect` (netns guard, `iptables-save` or `nft list`, plan vs found), per
 * backend. Wall time and CPU of this process plus the commands it ran (children's CPU from
 * /proc/self/stat), and what that costs a core on average at the default 60 s interval.
 */
import type { Pod } from '@istio-cni/capture';
import {
  createExecCommandRunner,
  createLegacyTablesFingerprinter,
  createNftGenerationReader,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
  type SidecarCaptureManager,
} from '@istio-cni/dataplane';
import { freshNetns } from './applySidecarRules.ts';
import { median, processCpuMs as cpuMs } from './measure.ts';

export interface VerifyPassSample {
  backend: string;
  pods: number;
  passes: number;
  /** Median wall time of one pass (pods checked one after another, as the agent does). */
  wallMedianMs: number;
  /** Median CPU of one pass: this process + the commands it ran. */
  cpuMedianMs: number;
  /** `cpuMedianMs` spread over the interval: the average share of one core. */
  corePercentAtInterval: number;
  /** Drift found (must be 0: every pod holds exactly its plan). */
  drifted: number;
}

export const INTERVAL_MS = 60_000;

/** The sidecar pod every verification bench checks (default sidecar rules). */
export const benchPod = (i: number): Pod => ({
  metadata: {
    name: `bench-${i}`,
    namespace: 'default',
    uid: `uid-bench-${i}`,
    annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' },
  },
  spec: { containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }] },
  status: { podIP: '10.1.0.5', podIPs: [{ ip: '10.1.0.5' }] },
});

export interface PassTiming {
  wallMs: number;
  cpuMs: number;
  drifted: number;
}

/** One pass: `check` on each item in turn (as the agent does), true when it found drift. */
export async function timePass<T>(items: readonly T[], check: (item: T, index: number) => Promise<boolean>): Promise<PassTiming> {
  const cpu0 = cpuMs();
  const start = process.hrtime.bigint();
  let drifted = 0;
  for (const [i, item] of items.entries()) if (await check(item, i)) drifted++;
  return { wallMs: Number(process.hrtime.bigint() - start) / 1e6, cpuMs: cpuMs() - cpu0, drifted };
}

/** A warm-up pass, then `passes` timed ones, summarised. */
export async function measurePasses(
  backend: string,
  pods: number,
  passes: number,
  pass: () => Promise<PassTiming>,
): Promise<VerifyPassSample> {
  await pass();
  const runs: PassTiming[] = [];
  for (let i = 0; i < passes; i++) runs.push(await pass());
  const cpuMedianMs = median(runs.map((r) => r.cpuMs));
  return {
    backend,
    pods,
    passes,
    wallMedianMs: median(runs.map((r) => r.wallMs)),
    cpuMedianMs,
    corePercentAtInterval: (cpuMedianMs / INTERVAL_MS) * 100,
    drifted: Math.max(...runs.map((r) => r.drifted)),
  };
}

function onePass(manager: SidecarCaptureManager, netns: readonly string[]): Promise<PassTiming> {
  return timePass(netns, async (path, i) => (await manager.inspect(benchPod(i), path, ['10.1.0.5'])).length > 0);
}

export async function benchVerifyPass(pods = 110, passes = 5): Promise<VerifyPassSample[]> {
  const runner = createExecCommandRunner();
  // As the agent runs: nf_tables backends skip a netns whose generation has not moved, iptables-legacy
  // one whose legacy tables' fingerprint has not (every pass after the first here, as nothing
  // changes); "(read every pass)" disables that to show the full cost.
  const backends = [
    { name: 'iptables-nft', nativeNftables: false, forceIptablesBinary: 'nft', generations: true },
    { name: 'iptables-nft (read every pass)', nativeNftables: false, forceIptablesBinary: 'nft', generations: false },
    { name: 'iptables-legacy (fingerprint unchanged)', nativeNftables: false, forceIptablesBinary: 'legacy', generations: true },
    { name: 'iptables-legacy (read every pass)', nativeNftables: false, forceIptablesBinary: 'legacy', generations: false },
    { name: 'nft', nativeNftables: true, generations: true },
    { name: 'nft (read every pass)', nativeNftables: true, generations: false },
  ];
  const samples: VerifyPassSample[] = [];
  for (const b of backends) {
    const manager = createSidecarCaptureManager({
      runner,
      openScratchNetns: createScratchNetnsOpener(),
      netnsGuard: createPodNetnsGuard({ hostProcDir: '/proc' }),
      nativeNftables: b.nativeNftables,
      ...(b.generations ? { nftGenerations: createNftGenerationReader(), legacyFingerprints: createLegacyTablesFingerprinter() } : {}),
      ...(b.forceIptablesBinary ? { forceIptablesBinary: b.forceIptablesBinary } : {}),
    });
    const namespaces: { path: string; remove: () => void }[] = [];
    try {
      for (let i = 0; i < pods; i++) {
        const ns = freshNetns();
        namespaces.push(ns);
        await manager.apply(benchPod(i), ns.path, ['10.1.0.5/24']);
      }
      const paths = namespaces.map((n) => n.path);
      // The warm-up pass caches the plan's canonical form.
      samples.push(await measurePasses(b.name, pods, passes, () => onePass(manager, paths)));
    } finally {
      for (const ns of namespaces) ns.remove();
    }
  }
  return samples;
}

export function printVerifyPass(kind: 'sidecar' | 'ambient', samples: readonly VerifyPassSample[]): void {
  console.log(`\n## Continuous verification: one pass over ${samples[0]?.pods ?? 0} ${kind} pods (agent code, real netns)\n`);
  console.log('| backend | passes | wall median ms | CPU median ms (incl. commands) | share of one core at 60 s | drift found |');
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const s of samples) {
    console.log(
      `| ${s.backend} | ${s.passes} | ${s.wallMedianMs.toFixed(0)} | ${s.cpuMedianMs.toFixed(0)} | ${s.corePercentAtInterval.toFixed(2)} % | ${s.drifted} |`,
    );
  }
}

if (import.meta.main) {
  printVerifyPass('sidecar', await benchVerifyPass(Number(process.env.PODS ?? 110), Number(process.env.PASSES ?? 5)));
}
