import { AnnotationError, captureConfigFromRedirect, redirectFromPod, sidecarDecision } from '@istio-cni/capture';
import type { CaptureConfig, Redirect } from '@istio-cni/capture';
import {
  applyIptablesRules,
  applyNftRules,
  configureTproxyRoutes,
  detectIptablesBackend,
  ipv6Enabled,
  parseIpAddrJson,
} from '@istio-cni/dataplane';
import type { CommandRunner, OpenScratchNetns, SidecarRulePlan } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import { buildCapturePlan, formatDryRun } from './buildCapturePlan.ts';
import { parsePodManifest, PodManifestError } from './parsePodManifest.ts';
import { parseResolvConf } from './parseResolvConf.ts';
import type { IstioIptablesSettings } from './resolveIstioIptablesSettings.ts';
import { UsageError } from './usageError.ts';

export interface IstioIptablesRuntime {
  readonly runner: CommandRunner;
  readonly openScratchNetns: OpenScratchNetns;
  readTextFile(path: string): Promise<string>;
  /** Rejects when `path` is not a namespace file. */
  checkNetns(path: string): Promise<void>;
  /** Path of this process's own netns, used when none is given. */
  readonly ownNetns: string;
  readonly logger: Logger;
  /** Standard output: the dry-run documents. */
  write(text: string): void;
}

export type IstioIptablesOutcome =
  | { readonly kind: 'skipped'; readonly reason: string }
  | { readonly kind: 'dry-run'; readonly plan: SidecarRulePlan }
  | { readonly kind: 'applied'; readonly plan: SidecarRulePlan; readonly result: string };

/**
 * The istio-iptables run: settings (already validated) → capture config → rendered plan → print
 * (dry-run) or apply in the netns, then the TPROXY routes. Nothing is written before every input,
 * including the pod manifest and resolv.conf, has been read and validated.
 */
export async function runIstioIptables(settings: IstioIptablesSettings, rt: IstioIptablesRuntime): Promise<IstioIptablesOutcome> {
  if (settings.netns !== undefined) {
    await rt.checkNetns(settings.netns).catch((err: unknown) => {
      throw new UsageError('--network-namespace', settings.netns, (err as Error).message);
    });
  }
  for (const flag of settings.ignored) rt.logger.info(`--${flag} has no effect here`);
  const source = await captureSource(settings, rt);
  if (source.kind === 'skipped') {
    rt.logger.info('pod is not redirected; nothing to do', { reason: source.reason });
    return source;
  }
  if (settings.skipRuleApply) {
    rt.logger.info('--skip-rule-apply: no rules applied');
    return { kind: 'skipped', reason: '--skip-rule-apply' };
  }
  const ipv6 = settings.enableIPv6 ?? (await detectIpv6(rt, settings.netns, source.dualStack));
  const config = await source.config(ipv6);
  const plan = buildCapturePlan(config, settings.nativeNftables);
  if (settings.dryRun) {
    rt.write(formatDryRun(plan));
    return { kind: 'dry-run', plan };
  }
  const netns = settings.netns ?? rt.ownNetns;
  const result = await applyPlan(plan, settings, rt, netns);
  await configureTproxyRoutes(rt.runner, {
    netns,
    ipv6,
    tproxy: config.inboundInterceptionMode === 'TPROXY' && config.inboundPortsInclude.length > 0,
    mark: config.inboundTProxyMark,
    table: config.inboundTProxyRouteTable,
  });
  rt.logger.info('sidecar capture rules in place', { netns, backend: plan.backend, ipv6, result });
  return { kind: 'applied', plan, result };
}

type CaptureSource =
  | { readonly kind: 'skipped'; readonly reason: string }
  | { readonly kind: 'config'; readonly dualStack: boolean; config(ipv6: boolean): Promise<CaptureConfig> };

async function captureSource(settings: IstioIptablesSettings, rt: IstioIptablesRuntime): Promise<CaptureSource> {
  if (settings.podFile === undefined) {
    const capture = settings.capture;
    if (capture === undefined) throw new Error('no capture settings without --pod');
    return {
      kind: 'config',
      dualStack: capture.dualStack,
      async config(ipv6) {
        // Upstream reads resolv.conf only for server-specific DNS capture.
        const dns = capture.redirectDns && !capture.captureAllDns ? await readDnsServers(settings.resolvConf, rt) : undefined;
        return {
          ...capture,
          ...settings.envCapture,
          enableIPv6: ipv6,
          dnsServersV4: dns?.v4 ?? [],
          dnsServersV6: dns?.v6 ?? [],
        };
      },
    };
  }
  const podFile = settings.podFile;
  const text = await rt.readTextFile(podFile).catch((err: unknown) => {
    throw new UsageError('--pod', podFile, `cannot read it: ${(err as Error).message}`);
  });
  const pod = (() => {
    try {
      return parsePodManifest(text, podFile);
    } catch (err) {
      if (err instanceof PodManifestError) throw new UsageError('--pod', podFile, err.message);
      throw err;
    }
  })();
  const decision = sidecarDecision(pod);
  if (!decision.redirect) return { kind: 'skipped', reason: decision.reason };
  let redirect: Redirect;
  try {
    redirect = redirectFromPod(pod);
  } catch (err) {
    if (err instanceof AnnotationError) throw new UsageError('--pod', podFile, err.message);
    throw err;
  }
  return {
    kind: 'config',
    dualStack: redirect.dualStack,
    // The plugin's own path; the process-level settings come from this process's environment.
    config: async (ipv6) => ({ ...captureConfigFromRedirect(redirect, { enableIPv6: ipv6 }), ...settings.envCapture }),
  };
}

async function readDnsServers(path: string, rt: IstioIptablesRuntime): Promise<ReturnType<typeof parseResolvConf>> {
  let text: string;
  try {
    text = await rt.readTextFile(path);
  } catch (err) {
    throw new Error(`failed to load ${path}: ${(err as Error).message}`, { cause: err });
  }
  const servers = parseResolvConf(text);
  for (const bad of servers.skipped) rt.logger.warn('skipping a nameserver that is not an IP address', { path, nameserver: bad });
  return servers;
}

/** IPv6 detection as upstream `tools/common/config`, read-only: `ip -j addr show` in the netns (or right here). */
async function detectIpv6(rt: IstioIptablesRuntime, netns: string | undefined, dualStack: boolean): Promise<boolean> {
  const { stdout } = await rt.runner.run(['ip', '-j', 'addr', 'show'], netns === undefined ? {} : { netns });
  try {
    return ipv6Enabled(parseIpAddrJson(stdout), dualStack);
  } catch (err) {
    const where = netns === undefined ? 'the current netns' : `netns ${JSON.stringify(netns)}`;
    throw new Error(`failed to detect the IP family of ${where}: ${(err as Error).message} (set ENABLE_INBOUND_IPV6 to skip detection)`, {
      cause: err,
    });
  }
}

async function applyPlan(plan: SidecarRulePlan, settings: IstioIptablesSettings, rt: IstioIptablesRuntime, netns: string): Promise<string> {
  const deps = { runner: rt.runner, openScratchNetns: rt.openScratchNetns };
  if (plan.backend === 'nft') {
    return applyNftRules(deps, { netns, script: plan.script, reconcile: settings.reconcile });
  }
  const backend = await detectIptablesBackend(rt.runner, {
    netns,
    ...(settings.forceIptablesBinary === undefined ? {} : { forceBinary: settings.forceIptablesBinary }),
  });
  const { outcome } = await applyIptablesRules(deps, { netns, backend, documents: plan.documents, reconcile: settings.reconcile });
  return `${backend.binaries.ipv4.iptables}: ipv4 ${outcome.ipv4}, ipv6 ${outcome.ipv6}`;
}
