import type { CommandRunner, RunOptions } from '../commandRunner.ts';
import { type BranchEniRoute, iifRulesByTable, matchBranchEniRoute, parseHostRoutes, parseIifRules } from './branchEniRoute.ts';
import { ipRuleArgv, planBranchEniRules } from './branchEniRules.ts';
import { type PodAddress, parsePodAddress } from './podAddress.ts';

export type BranchEniLog = (level: 'debug' | 'info' | 'warn', msg: string, fields?: Record<string, unknown>) => void;

export interface BranchEniProbeRulesOptions {
  runner: CommandRunner;
  /** HOST_PROC_DIR: `tcp_early_demux` is read from `<hostProcDir>/sys/net/ipv4/`. */
  hostProcDir: string;
  /** Host netns path; undefined runs in the agent's own netns. */
  netns?: string;
  /** Path or name of ip(8). */
  ip?: string;
  /** Path or name of cat(1). */
  cat?: string;
  log?: BranchEniLog;
}

/** One pod IP's branch ENI rules: added (or removed), or `error` saying why not. */
export interface BranchEniOutcome {
  ip: string;
  route: BranchEniRoute;
  error?: string;
}

/**
 * Upstream `brancheni_linux.go` and its callers in `meshdataplane_linux.go`: on a node prepared for
 * Security Groups for Pods, a pod IP that aws-vpc-cni routes over a branch ENI gets two host ip rules
 * so kubelet probes (SNATed to a link-local address the VPC fabric drops) reach it over its veth.
 * What was added is remembered per IP and removed from memory, not by detecting again: aws-vpc-cni
 * may have removed its own rules first.
 */
export interface BranchEniProbeRules {
  /** Detects and adds for each IP; never throws (failures are outcomes with `error`). Non-branch-ENI IPs give no outcome. */
  addPod(ips: readonly string[]): Promise<BranchEniOutcome[]>;
  /** Removes what `addPod` added for these IPs (best effort: failures are outcomes with `error`). */
  removePod(ips: readonly string[]): Promise<BranchEniOutcome[]>;
  /** Removes the rules of every remembered IP (agent shutdown with cleanup). */
  flush(): Promise<BranchEniOutcome[]>;
}

const EXISTS = /File exists/;

function alreadyExists(err: unknown): boolean {
  return EXISTS.test(String((err as { stderr?: unknown }).stderr ?? ''));
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function createBranchEniProbeRules(options: BranchEniProbeRulesOptions): BranchEniProbeRules {
  const ip = options.ip ?? 'ip';
  const log: BranchEniLog = options.log ?? (() => {});
  const runOptions: RunOptions = options.netns === undefined ? {} : { netns: options.netns };
  const run = (argv: string[]) => options.runner.run(argv, runOptions);
  const remembered = new Map<string, { pod: PodAddress; route: BranchEniRoute }>();
  let gate: Promise<boolean> | undefined;

  /**
   * AWS requires net.ipv4.tcp_early_demux=0 on SGP nodes and the kernel default is 1, so 0 is the
   * operator's signal that this node runs SGP; anywhere else detection stays inert. Read once.
   */
  const earlyDemuxDisabled = () =>
    (gate ??= (async () => {
      const path = `${options.hostProcDir.replace(/\/+$/, '')}/sys/net/ipv4/tcp_early_demux`;
      let text: string;
      try {
        text = (await run([options.cat ?? 'cat', path])).stdout;
      } catch (err) {
        log('debug', 'could not read tcp_early_demux, assuming the default (enabled)', { path, error: message(err) });
        return false;
      }
      const disabled = text.startsWith('0');
      if (disabled) log('info', 'net.ipv4.tcp_early_demux=0; AWS branch ENI probe detection enabled');
      else log('debug', 'net.ipv4.tcp_early_demux=1 (default); AWS branch ENI probe detection skipped');
      return disabled;
    })());

  async function detect(pod: PodAddress): Promise<BranchEniRoute | undefined> {
    let byTable: Map<number, ReturnType<typeof parseIifRules>>;
    try {
      byTable = iifRulesByTable(parseIifRules((await run([ip, '-N', '-j', `-${pod.family}`, 'rule', 'show'])).stdout));
    } catch (err) {
      log('debug', 'failed to list ip rules', { error: message(err) });
      return undefined;
    }
    for (const [table, rules] of byTable) {
      let routes: ReturnType<typeof parseHostRoutes>;
      try {
        routes = parseHostRoutes((await run([ip, '-N', '-j', `-${pod.family}`, 'route', 'show', 'table', String(table)])).stdout);
      } catch {
        continue;
      }
      const route = matchBranchEniRoute(pod, table, rules, routes);
      if (route !== undefined) return route;
    }
    return undefined;
  }

  async function add(pod: PodAddress, route: BranchEniRoute): Promise<void> {
    const plan = planBranchEniRules(pod, route);
    let forwardAdded = false;
    try {
      await run(ipRuleArgv(ip, pod.family, 'add', plan.forward));
      forwardAdded = true;
    } catch (err) {
      if (!alreadyExists(err)) throw new Error(`failed to add forward ip rule for branch ENI pod ${pod.address}: ${message(err)}`);
    }
    try {
      await run(ipRuleArgv(ip, pod.family, 'add', plan.return));
    } catch (err) {
      if (alreadyExists(err)) return;
      // Not left half-done on the host.
      if (forwardAdded) {
        await run(ipRuleArgv(ip, pod.family, 'del', plan.forward)).catch((delErr: unknown) =>
          log('warn', 'failed to roll back the forward ip rule of a branch ENI pod', { ip: pod.address, error: message(delErr) }),
        );
      }
      throw new Error(`failed to add return ip rule for branch ENI veth ${route.veth}: ${message(err)}`);
    }
  }

  async function remove(pod: PodAddress, route: BranchEniRoute): Promise<BranchEniOutcome> {
    const plan = planBranchEniRules(pod, route);
    const errors: string[] = [];
    for (const selector of [plan.forward, plan.return]) {
      await run(ipRuleArgv(ip, pod.family, 'del', selector)).catch((err: unknown) => errors.push(message(err)));
    }
    return { ip: pod.address, route, ...(errors.length > 0 ? { error: errors.join('; ') } : {}) };
  }

  function parseAll(ips: readonly string[]): PodAddress[] {
    const pods: PodAddress[] = [];
    for (const text of ips) {
      try {
        pods.push(parsePodAddress(text));
      } catch (err) {
        log('debug', 'not a pod IP; no branch ENI detection', { error: message(err) });
      }
    }
    return pods;
  }

  return {
    async addPod(ips) {
      const outcomes: BranchEniOutcome[] = [];
      if (!(await earlyDemuxDisabled())) return outcomes;
      for (const pod of parseAll(ips)) {
        const route = await detect(pod);
        if (route === undefined) continue;
        try {
          await add(pod, route);
          remembered.set(pod.address, { pod, route });
          outcomes.push({ ip: pod.address, route });
        } catch (err) {
          outcomes.push({ ip: pod.address, route, error: message(err) });
        }
      }
      return outcomes;
    },
    async removePod(ips) {
      const outcomes: BranchEniOutcome[] = [];
      for (const pod of parseAll(ips)) {
        const entry = remembered.get(pod.address);
        if (entry === undefined) continue;
        remembered.delete(pod.address);
        outcomes.push(await remove(entry.pod, entry.route));
      }
      return outcomes;
    },
    async flush() {
      const entries = [...remembered.values()];
      remembered.clear();
      const outcomes: BranchEniOutcome[] = [];
      for (const { pod, route } of entries) outcomes.push(await remove(pod, route));
      return outcomes;
    },
  };
}
