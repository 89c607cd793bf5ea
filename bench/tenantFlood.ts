/**
 * What a tenant with NET_ADMIN costs the agent by flooding its own pod netns: a captured sidecar
 * pod whose netns also holds FLOOD_RULES (default 100,000) rules of the tenant's (a chain of its own
 * in the nat table, each rule with a comment; with native nftables a table of its own), against the
 * same pod without them, measured in the same run. Per backend, in a fresh process each with the
 * daemon's V8 flags (so its peak RSS is this work's alone, as the daemon would hold it), through the agent's own `SidecarCaptureManager`: one inspection
 * (read every time, as when the tenant moves the netns's generation at every pass), then the
 * tenant's flood stays and our capture is broken (our chain flushed), and one repair. The foreign
 * rules are never drift, the repair leaves no drift, and the process's peak RSS shows what the read
 * of a flooded netns costs. With native nftables, one more case: the tenant's table imitates ours
 * (`istio-proxy-tenant`), so every inspection reports it (drift 1) and the repair removes it, flood
 * and all. The agent refuses a read-back beyond 16 MiB (ERR_DATAPLANE_OUTPUT_TOO_LARGE:
 * the pod is reported unverifiable), so this is the most memory a netns's rules can cost it.
 *
 * Part of `make bench`. Alone, as root after `make build`: `node bench/tenantFlood.ts`
 * (FLOOD_RULES=100000, PASSES=3, BACKENDS=iptables-nft,iptables-legacy,nft).
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  createExecCommandRunner,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
  type SidecarCaptureManager,
} from '@istio-cni/dataplane';
import { DAEMON_EXEC_ARGV } from '../scripts/daemonRuntimeFlags.ts';
import { readRssKiB } from '../test/support/watchPeakRss.ts';
import { freshNetns } from './applySidecarRules.ts';
import { median, processCpuMs } from './measure.ts';
import { benchPod } from './verifyPass.ts';

interface Backend {
  name: string;
  nativeNftables: boolean;
  forceIptablesBinary?: 'nft' | 'legacy';
}

const ALL_BACKENDS: readonly Backend[] = [
  { name: 'iptables-nft', nativeNftables: false, forceIptablesBinary: 'nft' },
  { name: 'iptables-legacy', nativeNftables: false, forceIptablesBinary: 'legacy' },
  { name: 'nft', nativeNftables: true },
];

const BACKENDS: readonly Backend[] = (process.env.BACKENDS?.split(',') ?? ['iptables-nft', 'iptables-legacy', 'nft']).map((name) => {
  const known = ALL_BACKENDS.find((b) => b.name === name);
  if (known === undefined) throw new Error(`BACKENDS: unknown backend ${JSON.stringify(name)}`);
  return known;
});

export interface TenantFloodSample {
  backend: string;
  tenantRules: number;
  /** The tenant's table is named like ours (native nftables): drift 1 at each inspection, removed by the repair. */
  imitation: boolean;
  /** Median of the timed inspections: wall and CPU (this process and the commands it ran). */
  inspectWallMs: number;
  inspectCpuMs: number;
  /** Drift the inspections found (0: the tenant's rules are not ours; 1 with an imitation). */
  inspectDrift: number;
  repairWallMs: number;
  repairCpuMs: number;
  /** Drift found right after the repair (must be 0). */
  driftAfterRepair: number;
  /** The measuring process's RSS before its first inspection, and its peak (VmHWM) at the end. */
  rssStartKiB: number;
  rssPeakKiB: number;
}

function manager(backend: Backend): SidecarCaptureManager {
  return createSidecarCaptureManager({
    runner: createExecCommandRunner(),
    openScratchNetns: createScratchNetnsOpener(),
    netnsGuard: createPodNetnsGuard({ hostProcDir: '/proc' }),
    nativeNftables: backend.nativeNftables,
    ...(backend.forceIptablesBinary === undefined ? {} : { forceIptablesBinary: backend.forceIptablesBinary }),
  });
}

function inNetns(netns: string, argv: readonly string[], stdin?: string): void {
  execFileSync('nsenter', [`--net=${netns}`, '--', ...argv], { input: stdin ?? '', stdio: ['pipe', 'ignore', 'pipe'], maxBuffer: 1 << 20 });
}

const address = (i: number) => `10.${200 + ((i >> 16) & 0x1f)}.${(i >> 8) & 0xff}.${i & 0xff}`;

/** What a tenant puts in its own netns: `rules` rules in a chain (or table: `nftTable`) of its own. */
function flood(backend: Backend, netns: string, rules: number, nftTable = 'tenant'): void {
  if (rules === 0) return;
  const lines: string[] = [];
  if (backend.nativeNftables) {
    lines.push(`add table inet ${nftTable}`, `add chain inet ${nftTable} flood`);
    for (let i = 0; i < rules; i++)
      lines.push(`add rule inet ${nftTable} flood ip saddr ${address(i)} counter return comment "tenant rule ${i}"`);
    inNetns(netns, ['nft', '-f', '-'], `${lines.join('\n')}\n`);
    return;
  }
  lines.push('*nat', ':TENANT - [0:0]');
  for (let i = 0; i < rules; i++) lines.push(`-A TENANT -s ${address(i)}/32 -m comment --comment "tenant rule ${i}" -j RETURN`);
  lines.push('-A OUTPUT -j TENANT', 'COMMIT');
  inNetns(netns, [`iptables-${backend.forceIptablesBinary ?? 'nft'}-restore`, '--noflush'], `${lines.join('\n')}\n`);
}

/** Breaks the pod's capture as drift would: our nat chain (table) emptied. */
function breakCapture(backend: Backend, netns: string): void {
  if (backend.nativeNftables) inNetns(netns, ['nft', 'flush', 'table', 'inet', 'istio-proxy-nat']);
  else inNetns(netns, [`iptables-${backend.forceIptablesBinary ?? 'nft'}`, '-t', 'nat', '-F', 'ISTIO_OUTPUT']);
}

function peakRssKiB(): number {
  const m = /^VmHWM:\s+(\d+)\s+kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) : 0;
}

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; wallMs: number; cpuMs: number }> {
  const cpu0 = processCpuMs();
  const start = process.hrtime.bigint();
  const value = await fn();
  return { value, wallMs: Number(process.hrtime.bigint() - start) / 1e6, cpuMs: processCpuMs() - cpu0 };
}

/** In the measuring process: inspections, the capture broken, one repair, one more inspection. */
interface FloodCase {
  backend: Backend;
  netns: string;
  tenantRules: number;
  passes: number;
  imitation: boolean;
}

async function measureInThisProcess({ backend, netns, tenantRules, passes, imitation }: FloodCase): Promise<TenantFloodSample> {
  const rssStartKiB = readRssKiB(process.pid) ?? 0;
  const m = manager(backend);
  const pod = benchPod(0);
  const inspect = () => m.inspect(pod, netns, ['10.1.0.5']);
  await inspect(); // the plan's canonical form, cached as in the agent
  const runs = [];
  for (let i = 0; i < passes; i++) runs.push(await timed(inspect));
  breakCapture(backend, netns);
  const broken = await inspect();
  if (broken.length === 0) throw new Error(`${backend.name}: the broken capture was not seen as drift`);
  const repair = await timed(() => m.repair(pod, netns, ['10.1.0.5']));
  const after = await inspect();
  return {
    backend: backend.name,
    tenantRules,
    imitation,
    inspectWallMs: median(runs.map((r) => r.wallMs)),
    inspectCpuMs: median(runs.map((r) => r.cpuMs)),
    inspectDrift: Math.max(...runs.map((r) => r.value.length)),
    repairWallMs: repair.wallMs,
    repairCpuMs: repair.cpuMs,
    driftAfterRepair: after.length,
    rssStartKiB,
    rssPeakKiB: peakRssKiB(),
  };
}

const self = fileURLToPath(import.meta.url);

function measureInChild({ backend, netns, tenantRules, passes, imitation }: FloodCase): Promise<TenantFloodSample> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [...DAEMON_EXEC_ARGV, self, '--measure', backend.name, netns, String(tenantRules), String(passes), String(imitation)],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.once('close', (code) => {
      if (code !== 0) reject(new Error(`tenant flood measurement (${backend.name}, ${tenantRules} rules) exited ${code}: ${err}`));
      else resolve(JSON.parse(out) as TenantFloodSample);
    });
  });
}

export async function benchTenantFlood(rules = 100_000, passes = 3): Promise<TenantFloodSample[]> {
  const samples: TenantFloodSample[] = [];
  for (const backend of BACKENDS) {
    const cases = [
      { tenantRules: 0, imitation: false },
      { tenantRules: rules, imitation: false },
      ...(backend.nativeNftables ? [{ tenantRules: rules, imitation: true }] : []),
    ];
    for (const { tenantRules, imitation } of cases) {
      const ns = freshNetns();
      try {
        await manager(backend).apply(benchPod(0), ns.path, ['10.1.0.5/24']);
        flood(backend, ns.path, tenantRules, imitation ? 'istio-proxy-tenant' : 'tenant');
        samples.push(await measureInChild({ backend, netns: ns.path, tenantRules, passes, imitation }));
      } finally {
        ns.remove();
      }
    }
  }
  return samples;
}

export function printTenantFlood(samples: readonly TenantFloodSample[]): void {
  console.log('\n## A tenant floods its own pod netns: one sidecar pod, with and without its rules (agent code, real netns)\n');
  console.log(
    '| backend | tenant rules | inspect wall ms | inspect CPU ms | drift | repair wall ms | repair CPU ms | drift after repair | RSS start MiB | peak RSS MiB |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const s of samples) {
    console.log(
      `| ${s.backend}${s.imitation ? ' (its table named istio-proxy-tenant)' : ''} | ${s.tenantRules} | ${s.inspectWallMs.toFixed(0)} | ${s.inspectCpuMs.toFixed(0)} | ${s.inspectDrift} | ${s.repairWallMs.toFixed(0)} | ${s.repairCpuMs.toFixed(0)} | ${s.driftAfterRepair} | ${(s.rssStartKiB / 1024).toFixed(1)} | ${(s.rssPeakKiB / 1024).toFixed(1)} |`,
    );
  }
}

if (import.meta.main) {
  const [flag, name, netns, rules, passes, imitation] = process.argv.slice(2);
  if (flag === '--measure') {
    const backend = ALL_BACKENDS.find((b) => b.name === name);
    if (backend === undefined || netns === undefined)
      throw new Error(`usage: tenantFlood.ts --measure <${ALL_BACKENDS.map((b) => b.name).join('|')}> <netns> <rules> <passes>`);
    process.stdout.write(
      JSON.stringify(
        await measureInThisProcess({ backend, netns, tenantRules: Number(rules), passes: Number(passes), imitation: imitation === 'true' }),
      ),
    );
  } else {
    printTenantFlood(await benchTenantFlood(Number(process.env.FLOOD_RULES ?? 100_000), Number(process.env.PASSES ?? 3)));
  }
}
