/**
 * Cost of capturing one sidecar pod: apply the default sidecar rule set (the upstream `basic`
 * rules) into a fresh netns, per backend, against a bare `nsenter --net=<netns> true` measured in
 * the same run. Namespace creation and teardown are not timed.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  buildSidecarIptablesRules,
  buildSidecarNftRules,
  type CaptureConfig,
  DEFAULT_CAPTURE_CONFIG,
  renderIptablesRestore,
  renderNftTransaction,
} from '@istio-cni/capture';
import {
  applySidecarCapture,
  createExecCommandRunner,
  createScratchNetnsOpener,
  detectIptablesBackend,
  type IptablesBackend,
  type SidecarRulePlan,
} from '@istio-cni/dataplane';
import { median } from './measure.ts';

export interface ApplySidecarRulesSample {
  backend: string;
  runs: number;
  /** Median wall time of applySidecarCapture (IP family probe + rules) into a fresh netns. */
  applyMedianMs: number;
  /** Median wall time of `nsenter --net=<netns> true` in the same run. */
  nsenterMedianMs: number;
  ratio: number;
}

const defaultConfig: CaptureConfig = {
  ...DEFAULT_CAPTURE_CONFIG,
  inboundPortsInclude: '*',
  inboundPortsExclude: [15020, 15021, 15090],
  outboundPortsExclude: [15020],
  outboundIPRangesInclude: '*',
};

function plan(kind: 'iptables' | 'nft'): SidecarRulePlan {
  if (kind === 'nft') return { backend: 'nft', script: renderNftTransaction(buildSidecarNftRules(defaultConfig)) };
  return { backend: 'iptables', documents: { ipv4: renderIptablesRestore(buildSidecarIptablesRules(defaultConfig).v4) } };
}

/** A netns with lo up and an addressed veth end `eth0` (10.1.0.5/24); `remove` deletes it. */
export function freshNetns(): { path: string; remove: () => void } {
  const name = `dpbench-${randomBytes(4).toString('hex')}`;
  execFileSync('ip', ['netns', 'add', name]);
  const remove = () => execFileSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
  try {
    execFileSync('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
    execFileSync('ip', ['-n', name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
    execFileSync('ip', ['-n', name, 'addr', 'add', '10.1.0.5/24', 'dev', 'eth0']);
    execFileSync('ip', ['-n', name, 'link', 'set', 'eth0', 'up']);
  } catch (err) {
    remove();
    throw err;
  }
  return { path: `/var/run/netns/${name}`, remove };
}

async function timed(fn: (netns: string) => Promise<unknown>): Promise<number> {
  const ns = freshNetns();
  try {
    const start = process.hrtime.bigint();
    await fn(ns.path);
    return Number(process.hrtime.bigint() - start) / 1e6;
  } finally {
    ns.remove();
  }
}

/** Runs `runs` interleaved samples per backend (after `warmup`) and returns the medians. */
export async function benchApplySidecarRules(runs: number, warmup = 3): Promise<ApplySidecarRulesSample[]> {
  const runner = createExecCommandRunner();
  const deps = { runner, openScratchNetns: createScratchNetnsOpener() };
  const backends: { name: string; kind: 'iptables' | 'nft'; iptablesBackend?: IptablesBackend }[] = [
    { name: 'iptables-nft', kind: 'iptables', iptablesBackend: await detectIptablesBackend(runner, { forceBinary: 'nft' }) },
    { name: 'iptables-legacy', kind: 'iptables', iptablesBackend: await detectIptablesBackend(runner, { forceBinary: 'legacy' }) },
    { name: 'nft', kind: 'nft' },
  ];
  const times = new Map<string, number[]>([['nsenter', []], ...backends.map((b): [string, number[]] => [b.name, []])]);
  for (let i = 0; i < warmup + runs; i++) {
    const keep = i >= warmup;
    const base = await timed((netns) => runner.run(['true'], { netns }));
    if (keep) times.get('nsenter')?.push(base);
    for (const b of backends) {
      const ms = await timed((netns) =>
        applySidecarCapture(deps, {
          netns,
          plan: () => plan(b.kind),
          ...(b.iptablesBackend === undefined ? {} : { iptablesBackend: b.iptablesBackend }),
        }),
      );
      if (keep) times.get(b.name)?.push(ms);
    }
  }
  const nsenterMedianMs = median(times.get('nsenter') ?? []);
  return backends.map((b) => {
    const applyMedianMs = median(times.get(b.name) ?? []);
    return { backend: b.name, runs, applyMedianMs, nsenterMedianMs, ratio: applyMedianMs / nsenterMedianMs };
  });
}
