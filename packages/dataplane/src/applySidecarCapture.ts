import {
  type ApplyIptablesResult,
  type ApplyOutcome,
  applyIptablesRules,
  type IptablesDocuments,
  verifyIptablesRules,
} from './applyIptablesRules.ts';
import { applyNftRules, verifyNftRules } from './applyNftRules.ts';
import type { CommandRunner } from './commandRunner.ts';
import { configureTproxyRoutes } from './configureTproxyRoutes.ts';
import { detectIptablesBackend, type IptablesBackend } from './detectIptablesBackend.ts';
import { detectPodIpv6, ipv6EnabledFromResultIps } from './detectPodIpv6.ts';
import type { IptablesState } from './iptablesState.ts';
import type { OpenScratchNetns } from './scratchNetns.ts';

/** Rendered capture rules for one pod: iptables-restore documents or one nft script. */
export type SidecarRulePlan = { backend: 'iptables'; documents: IptablesDocuments } | { backend: 'nft'; script: string };

export interface SidecarCaptureDeps {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  iptablesCanonicalCache?: Map<string, IptablesState>;
  nftCanonicalCache?: Map<string, Map<string, string>>;
}

export interface ApplySidecarCaptureOptions {
  netns: string;
  /** Renders the rules once the pod's IP family is known (the rule builder needs it). */
  plan: (pod: { ipv6: boolean }) => SidecarRulePlan;
  /** TPROXY interception with inbound capture: add the fwmark policy routes. */
  tproxyRoutes?: boolean;
  /** ISTIO_DUAL_STACK: any global IPv6 address enables IPv6 rules. */
  dualStack?: boolean;
  /** The pod's addresses from the CNI result; when usable they replace the probe of the netns. */
  podIps?: readonly string[];
  reconcile?: boolean;
  /** Created for this CNI ADD: nothing of another agent can be in it (see `applyIptablesRules`). */
  freshNetns?: boolean;
  /** Chosen iptables binaries; detected inside the netns when absent. */
  iptablesBackend?: IptablesBackend;
  /** FORCE_IPTABLES_BINARY, used only when the backend is detected here. */
  forceIptablesBinary?: string;
}

export interface SidecarCaptureResult {
  ipv6: boolean;
  outcome: ApplyOutcome | ApplyIptablesResult['outcome'];
}

/**
 * The whole sidecar ADD side effect: detect the pod's IP family, render, apply the rules (all or
 * nothing per the state check), then the TPROXY routes. Routes come last so that a refused apply
 * leaves the namespace as it was.
 */
export async function applySidecarCapture(deps: SidecarCaptureDeps, options: ApplySidecarCaptureOptions): Promise<SidecarCaptureResult> {
  const ipv6 =
    ipv6EnabledFromResultIps(options.podIps ?? [], options.dualStack === true) ??
    (await detectPodIpv6(deps.runner, options.netns, { dualStack: options.dualStack === true }));
  const plan = options.plan({ ipv6 });
  let outcome: SidecarCaptureResult['outcome'];
  if (plan.backend === 'nft') {
    outcome = await applyNftRules(
      { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache('nft', deps) },
      { netns: options.netns, script: plan.script, reconcile: options.reconcile === true },
    );
  } else {
    const backend =
      options.iptablesBackend ??
      (await detectIptablesBackend(deps.runner, {
        netns: options.netns,
        ...(options.forceIptablesBinary === undefined ? {} : { forceBinary: options.forceIptablesBinary }),
      }));
    const result = await applyIptablesRules(
      { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache('iptables', deps) },
      {
        netns: options.netns,
        backend,
        documents: plan.documents,
        reconcile: options.reconcile === true,
        ...(options.freshNetns === true ? { freshNetns: true } : {}),
      },
    );
    outcome = result.outcome;
  }
  await configureTproxyRoutes(deps.runner, { netns: options.netns, ipv6, tproxy: options.tproxyRoutes === true });
  return { ipv6, outcome };
}

export interface VerifySidecarCaptureOptions {
  netns: string;
  plan: SidecarRulePlan;
  iptablesBackend?: IptablesBackend;
}

/** Differences between the netns's capture state and the plan; empty means in place. */
export async function verifySidecarCapture(deps: SidecarCaptureDeps, options: VerifySidecarCaptureOptions): Promise<string[]> {
  const plan = options.plan;
  if (plan.backend === 'nft') {
    return verifyNftRules(
      { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache('nft', deps) },
      { netns: options.netns, script: plan.script },
    );
  }
  const backend = options.iptablesBackend ?? (await detectIptablesBackend(deps.runner, { netns: options.netns }));
  return verifyIptablesRules(
    { runner: deps.runner, openScratchNetns: deps.openScratchNetns, ...cache('iptables', deps) },
    { netns: options.netns, backend, documents: plan.documents },
  );
}

function cache(kind: 'nft', deps: SidecarCaptureDeps): { canonicalCache?: Map<string, Map<string, string>> };
function cache(kind: 'iptables', deps: SidecarCaptureDeps): { canonicalCache?: Map<string, IptablesState> };
function cache(kind: 'nft' | 'iptables', deps: SidecarCaptureDeps): object {
  const c = kind === 'nft' ? deps.nftCanonicalCache : deps.iptablesCanonicalCache;
  return c === undefined ? {} : { canonicalCache: c };
}
