/**
 * The agent's CPU with continuous verification on: `dist/install-cni` (fake API) with 110 sidecar
 * pods added through the built plugin, its CPU (process + the commands it ran, from
 * /proc/<pid>/stat) over a window at VERIFY_INTERVAL 60 s that starts once the first pass is
 * over (steady state), against the same agent with verification off (VERIFY_INTERVAL 0). Per backend; the difference divided
 * by the window is the average share of one core that verification costs.
 */
import { readFileSync } from 'node:fs';
import { sidecarPod, namespaceObject } from '../test/support/meshPods.ts';
import { startAgentRig } from '../test/support/startAgentRig.ts';
import { freshNetns } from './applySidecarRules.ts';

export interface AgentCpuSample {
  backend: string;
  pods: number;
  windowS: number;
  /** Agent CPU over the window (ms), verification at 60 s / off. */
  onMs: number;
  offMs: number;
  corePercent: number;
}

function agentCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(f[i]), 0) * 10;
}

async function windowCpu(env: Record<string, string>, pods: number, windowS: number, settleS: number): Promise<number> {
  const rig = await startAgentRig(env);
  const namespaces: { remove: () => void }[] = [];
  try {
    rig.api.upsertNamespace(namespaceObject('default'));
    for (let i = 0; i < pods; i++) {
      const ns = freshNetns();
      namespaces.push(ns);
      const pod = sidecarPod('default', `cpu-${i}`);
      rig.api.upsertPod(pod);
      const res = await rig.exec('ADD', pod, { netns: ns.path, containerId: `cpu${i}`, address: '10.1.0.5/24' });
      if (res.code !== 0) throw new Error(`ADD cpu-${i}: ${res.stdout}${res.stderr}`);
    }
    // Past the first pass (it starts within one interval and spans one): the window shows the steady state.
    await new Promise((r) => setTimeout(r, settleS * 1000));
    const pid = rig.daemon.child.pid as number;
    const start = agentCpuMs(pid);
    await new Promise((r) => setTimeout(r, windowS * 1000));
    return agentCpuMs(pid) - start;
  } finally {
    await rig.close();
    for (const ns of namespaces) ns.remove();
  }
}

export async function benchVerifyAgentCpu(pods = 110, windowS = 120, settleS = 125): Promise<AgentCpuSample[]> {
  const out: AgentCpuSample[] = [];
  // With verification off the backend makes no difference: one baseline serves both.
  const offMs = await windowCpu({ FORCE_IPTABLES_BINARY: 'nft', VERIFY_INTERVAL: '0' }, pods, windowS, settleS);
  for (const [backend, env] of [
    ['iptables-nft', { FORCE_IPTABLES_BINARY: 'nft' }],
    ['iptables-legacy', { FORCE_IPTABLES_BINARY: 'legacy' }],
  ] as const) {
    const onMs = await windowCpu({ ...env, VERIFY_INTERVAL: '60s' }, pods, windowS, settleS);
    out.push({ backend, pods, windowS, onMs, offMs, corePercent: ((onMs - offMs) / (windowS * 1000)) * 100 });
  }
  return out;
}

export function printVerifyAgentCpu(samples: readonly AgentCpuSample[]): void {
  console.log(
    `\n## Agent CPU with continuous verification (${samples[0]?.pods ?? 0} sidecar pods, ${samples[0]?.windowS ?? 0} s window after the first pass)\n`,
  );
  console.log('| backend | CPU at VERIFY_INTERVAL=60s ms | CPU with verification off ms | verification share of one core |');
  console.log('|---|---:|---:|---:|');
  for (const s of samples) console.log(`| ${s.backend} | ${s.onMs} | ${s.offMs} | ${s.corePercent.toFixed(2)} % |`);
}

if (import.meta.main) {
  printVerifyAgentCpu(await benchVerifyAgentCpu(Number(process.env.PODS ?? 110), Number(process.env.WINDOW_S ?? 120)));
}
