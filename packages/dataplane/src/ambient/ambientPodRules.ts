import {
  type AmbientConfig,
  type AmbientPodOverrides,
  ambientPodIptablesDeletePlan,
  ambientPodNftDeleteScript,
  ambientPodRoutes,
  type AmbientPodRoutes,
  buildAmbientPodIptablesRules,
  buildAmbientPodNftRules,
  DEFAULT_AMBIENT_POD_OVERRIDES,
  ipRouteArgs,
  ipRuleArgs,
  renderAmbientPodNftTransaction,
  renderIptablesRestore,
} from '@istio-cni/capture';
import {
  type ApplyOutcome,
  applyIptablesRules,
  type IptablesDocuments,
  verifyIptablesRules,
  xtablesRunOptions,
} from '../applyIptablesRules.ts';
import { applyNftRules, verifyNftRules } from '../applyNftRules.ts';
import { choosePodIptablesBackend } from '../choosePodIptablesBackend.ts';
import type { CommandRunner } from '../commandRunner.ts';
import type { IptablesFamily, IptablesBackend, IptablesFlavor } from '../detectIptablesBackend.ts';
import type { IptablesState } from '../iptablesState.ts';
import type { OpenScratchNetns } from '../scratchNetns.ts';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import type { NetnsHandle } from './netnsHandle.ts';

/** iptables (binaries detected once in the host netns and reused for every pod) or native nft. */
export type AmbientRuleBackend = { kind: 'iptables'; iptables: IptablesBackend } | { kind: 'nft' };

export interface AmbientRulesDeps {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  iptablesCanonicalCache?: Map<string, IptablesState>;
  nftCanonicalCache?: Map<string, Map<string, string>>;
  /** Path or name of ip(8) and nft(8). */
  ip?: string;
  nft?: string;
}

/** A netns path, or an open handle (kept open for the duration of the call). */
export type NetnsTarget = string | NetnsHandle;

export interface AmbientPodRulesOptions {
  netns: NetnsTarget;
  config: AmbientConfig;
  backend: AmbientRuleBackend;
  overrides?: AmbientPodOverrides;
}

export type AmbientPodRulePlan = { backend: 'iptables'; documents: IptablesDocuments } | { backend: 'nft'; script: string };

const ambientNftTablePrefix = 'istio-ambient-';

/** The in-pod rules for one pod, rendered for the backend (pure). */
export function planAmbientPodRules(
  config: AmbientConfig,
  backend: AmbientRuleBackend,
  overrides = DEFAULT_AMBIENT_POD_OVERRIDES,
): AmbientPodRulePlan {
  if (backend.kind === 'nft') return { backend: 'nft', script: renderAmbientPodNftTransaction(buildAmbientPodNftRules(config, overrides)) };
  const rules = buildAmbientPodIptablesRules(config, overrides);
  const documents: IptablesDocuments = { ipv4: renderIptablesRestore(rules.v4) };
  if (rules.v6.length > 0) documents.ipv6 = renderIptablesRestore(rules.v6);
  return { backend: 'iptables', documents };
}

export function withNetnsPath<T>(target: NetnsTarget, fn: (path: string) => Promise<T>): Promise<T> {
  return typeof target === 'string' ? fn(target) : target.use(fn);
}

export interface AmbientPodRulesResult {
  outcome: ApplyOutcome | Record<IptablesFamily, ApplyOutcome | 'skipped'>;
  /** The pod's rules lived in this other iptables backend and were reconciled there. */
  adopted?: IptablesFlavor;
  /** A second copy of the pod's rules was removed from these backends. */
  removedDuplicates?: IptablesFlavor[];
}

/**
 * As upstream: the mark rule and loopback routes, then the in-pod rules through the shared
 * state check (`reconcile` = `AMBIENT_RECONCILE_POD_RULES_ON_STARTUP`): absent → applied,
 * identical → untouched, different → `ERR_DATAPLANE_STATE_CONFLICT` unless `reconcile`.
 */
export async function applyAmbientPodRules(
  deps: AmbientRulesDeps,
  /** `freshNetns`: created for this CNI ADD (see `applyIptablesRules`); not for a running pod. */
  options: AmbientPodRulesOptions & { reconcile?: boolean; freshNetns?: boolean },
): Promise<AmbientPodRulesResult> {
  return withNetnsPath(options.netns, async (netns) => {
    const routes = await podRoutes(deps, netns, options.config);
    await addRoutes(deps, netns, routes);
    const plan = planAmbientPodRules(options.config, options.backend, options.overrides);
    const reconcile = options.reconcile === true;
    if (plan.backend === 'nft') {
      const outcome = await applyNftRules(nftDeps(deps), {
        netns,
        script: plan.script,
        ownedTablePrefix: ambientNftTablePrefix,
        reconcile,
      });
      return { outcome };
    }
    const backend = (options.backend as { iptables: IptablesBackend }).iptables;
    const { outcome, adopted, removedDuplicates } = await applyIptablesRules(iptablesDeps(deps), {
      netns,
      backend,
      documents: plan.documents,
      reconcile,
      ...(options.freshNetns === true ? { freshNetns: true } : {}),
    });
    return { outcome, ...(adopted ? { adopted } : {}), ...(removedDuplicates ? { removedDuplicates } : {}) };
  });
}

/** Differences between the pod's rules and routes and the plan; empty means in place. */
export async function verifyAmbientPodRules(deps: AmbientRulesDeps, options: AmbientPodRulesOptions): Promise<string[]> {
  return withNetnsPath(options.netns, async (netns) => {
    const plan = planAmbientPodRules(options.config, options.backend, options.overrides);
    const differences =
      plan.backend === 'nft'
        ? await verifyNftRules(nftDeps(deps), { netns, script: plan.script, ownedTablePrefix: ambientNftTablePrefix })
        : await verifyIptablesRules(iptablesDeps(deps), {
            netns,
            backend: (options.backend as { iptables: IptablesBackend }).iptables,
            documents: plan.documents,
          });
    const routes = await podRoutes(deps, netns, options.config);
    for (const rule of routes.ipRules) {
      if (!(await hasIpRule(deps, netns, rule))) differences.push(`missing ip rule ${ipRuleArgs(rule, 'add').slice(1).join(' ')}`);
    }
    for (const route of routes.routes) {
      // A table that was never used does not exist: "FIB table does not exist".
      const { stdout } = await deps.runner
        .run([deps.ip ?? 'ip', `-${route.family}`, 'route', 'show', 'table', String(route.table), 'type', 'local'], { netns })
        .catch(() => ({ stdout: '' }));
      if (!/^local default dev lo\b/m.test(stdout)) differences.push(`missing route ${ipRouteArgs(route, 'replace').slice(3).join(' ')}`);
    }
    return differences;
  });
}

/**
 * Upstream's in-pod delete: every possible jump and chain (iptables, failures ignored:
 * most are optional) or the three tables (nft), then the mark rule and loopback routes. Unlike
 * upstream, a rule or route that is already gone is not an error, so deleting twice is fine;
 * real failures are collected and reported together after everything was tried.
 */
export async function deleteAmbientPodRules(deps: AmbientRulesDeps, options: Omit<AmbientPodRulesOptions, 'overrides'>): Promise<void> {
  return withNetnsPath(options.netns, async (netns) => {
    const errors: string[] = [];
    if (options.backend.kind === 'nft') {
      await deps.runner.run([deps.nft ?? 'nft', '-f', '-'], { netns, stdin: ambientPodNftDeleteScript() }).catch((err: unknown) => {
        errors.push((err as Error).message);
      });
    } else {
      // Wherever the pod's rules live: the node's backend, or the other one they were adopted in.
      const chosen = await choosePodIptablesBackend(deps.runner, options.backend.iptables, netns);
      const plan = ambientPodIptablesDeletePlan(options.config);
      for (const backend of [chosen.backend, ...chosen.duplicates]) {
        for (const [family, commands] of [
          ['ipv4', plan.v4],
          ['ipv6', plan.v6],
        ] as const) {
          for (const args of commands) {
            await deps.runner
              .run([backend.binaries[family].iptables, ...args], { ...xtablesRunOptions(backend, netns), enterNetnsOwner: true })
              .catch(() => {});
          }
        }
      }
    }
    // Both families, whatever the pod's disable_ipv6 says now: what was added must go.
    const routes = ambientPodRoutes(options.config);
    for (const rule of routes.ipRules) {
      if (!(await hasIpRule(deps, netns, rule).catch(() => true))) continue;
      await deps.runner.run(withIp(deps, ipRuleArgs(rule, 'del')), { netns }).catch((err: unknown) => errors.push((err as Error).message));
    }
    for (const route of routes.routes) {
      await deps.runner.run(withIp(deps, ipRouteArgs(route, 'del')), { netns }).catch((err: unknown) => {
        if (!/No such process|No such file or directory/.test(String((err as { stderr?: unknown }).stderr ?? '')))
          errors.push((err as Error).message);
      });
    }
    if (errors.length > 0) {
      throw new AmbientDataplaneError(
        'ERR_AMBIENT_POD_RULES',
        `failed to delete in-pod rules in netns ${JSON.stringify(netns)}: ${errors.join('; ')}`,
      );
    }
  });
}

async function podRoutes(deps: AmbientRulesDeps, netns: string, config: AmbientConfig): Promise<AmbientPodRoutes> {
  if (!config.enableIPv6) return ambientPodRoutes(config);
  // A missing file means IPv6 is off in this kernel altogether: no v6 loopback route either.
  const disabled = await deps.runner
    .run(['cat', '/proc/sys/net/ipv6/conf/lo/disable_ipv6'], { netns })
    .then(({ stdout }) => stdout.trim() === '1')
    .catch(() => true);
  return ambientPodRoutes(config, { loopbackIpv6Disabled: disabled });
}

/**
 * The mark rule and loopback route(s) of one family in a single `ip -batch` exec (upstream `cni/pkg/iptables`): the
 * rule add's EEXIST is ignored as upstream does (the kernel refuses the duplicate), the route is a
 * replace. With `-force` every line runs; only "File exists" on a rule line is tolerated.
 */
async function addRoutes(deps: AmbientRulesDeps, netns: string, routes: AmbientPodRoutes): Promise<void> {
  for (const family of [4, 6] as const) {
    const lines = [
      ...routes.ipRules.filter((r) => r.family === family).map((r) => ipRuleArgs(r, 'add').slice(2).join(' ')),
      ...routes.routes.filter((r) => r.family === family).map((r) => ipRouteArgs(r, 'replace').slice(2).join(' ')),
    ];
    if (lines.length === 0) continue;
    try {
      await deps.runner.run([deps.ip ?? 'ip', `-${family}`, '-force', '-batch', '-'], { netns, stdin: lines.join('\n') + '\n' });
    } catch (err) {
      if (!onlyExistingRules(err, lines)) throw err;
    }
  }
}

/** True when every failed batch line is a `rule add` that failed because the rule exists. */
function onlyExistingRules(err: unknown, lines: readonly string[]): boolean {
  const stderr = String((err as { stderr?: unknown }).stderr ?? '');
  const failed = [...stderr.matchAll(/Command failed -:(\d+)/g)].map((m) => Number(m[1]));
  if (failed.length === 0) return false;
  const otherErrors = stderr
    .split('\n')
    .filter((l) => l.trim() !== '' && !/^Command failed -:\d+$/.test(l.trim()) && !/File exists/.test(l));
  return otherErrors.length === 0 && failed.every((n) => lines[n - 1]?.startsWith('rule add ') === true);
}

async function hasIpRule(deps: AmbientRulesDeps, netns: string, rule: AmbientPodRoutes['ipRules'][number]): Promise<boolean> {
  const argv = withIp(deps, ipRuleArgs(rule, 'add'));
  argv[3] = 'list';
  const { stdout } = await deps.runner.run(argv, { netns });
  return stdout.trim() !== '';
}

function withIp(deps: AmbientRulesDeps, argv: string[]): string[] {
  return deps.ip === undefined ? argv : [deps.ip, ...argv.slice(1)];
}

function nftDeps(deps: AmbientRulesDeps) {
  return {
    runner: deps.runner,
    openScratchNetns: deps.openScratchNetns,
    ...(deps.nft === undefined ? {} : { nft: deps.nft }),
    ...(deps.nftCanonicalCache === undefined ? {} : { canonicalCache: deps.nftCanonicalCache }),
  };
}

function iptablesDeps(deps: AmbientRulesDeps) {
  return {
    runner: deps.runner,
    openScratchNetns: deps.openScratchNetns,
    ...(deps.iptablesCanonicalCache === undefined ? {} : { canonicalCache: deps.iptablesCanonicalCache }),
  };
}
