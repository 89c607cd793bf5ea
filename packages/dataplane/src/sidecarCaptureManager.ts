import type { CaptureEnvironment, Pod } from '@istio-cni/capture';
import { applySidecarCapture, verifySidecarCapture, type SidecarCaptureDeps, type SidecarRulePlan } from './applySidecarCapture.ts';
import type { IptablesState } from './iptablesState.ts';
import type { LegacyTablesFingerprinter } from './legacyTablesFingerprint.ts';
import type { CommandRunner } from './commandRunner.ts';
import { decideIptablesBackend, type IptablesBackend, type IptablesBackendDecision } from './detectIptablesBackend.ts';
import type { Drift } from './captureDrift.ts';
import type { NetnsHandle } from './ambient/netnsHandle.ts';
import { detectPodIpv6, ipv6EnabledFromResultIps, parseIpAddrJson } from './detectPodIpv6.ts';
import { iptablesFamiliesRead, inspectCapture } from './inspectCapture.ts';
import { planSidecarCapture } from './planSidecarCapture.ts';
import type { PodNetnsGuard } from './podNetnsGuard.ts';
import type { OpenScratchNetns } from './scratchNetns.ts';
import { type SidecarRuleKind, sidecarRulesHeldIn } from './sidecarRulesHeldIn.ts';

export interface SidecarCaptureManagerOptions {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  /** Opens and checks the pod netns before anything runs in it (never the node's own). */
  netnsGuard: PodNetnsGuard;
  nativeNftables: boolean;
  env?: CaptureEnvironment;
  /** FORCE_IPTABLES_BINARY (`legacy` | `nft`). */
  forceIptablesBinary?: string;
  /** Distinct rule plans whose canonical form is remembered (bounded: annotations vary plans). */
  cachedPlans?: number;
  /**
   * Lets `inspect` skip reading a netns whose nf_tables generation has not moved since it was last
   * found in place (iptables-nft and native nft). Injected, not
   * imported: the plugin bundles this module and carries no FFI.
   */
  nftGenerations?: { read(netnsFd: number): number };
  /**
   * The same for rules in iptables-legacy: a fingerprint of the netns's legacy tables of the
   * families the inspection reads (`legacyTablesFingerprint.ts`; both for a pod outside the mesh).
   * Injected, as above.
   */
  legacyFingerprints?: Pick<LegacyTablesFingerprinter, 'fingerprint'>;
  /** Told once which iptables backend was chosen and why (what was found where). */
  onBackendDecision?: (decision: IptablesBackendDecision) => void;
}

export interface SidecarCaptureManager {
  /**
   * Programs the pod's capture rules in `netns`; returns the apply outcome. `podIps` (from the CNI
   * result) decide the IP family without entering the netns. `netns` is opened once and checked
   * (`PodNetnsRefusedError` for the node's netns and the like); the commands run through that fd.
   * `freshNetns`: the netns was created for this CNI ADD (not a repair of a running pod).
   */
  apply(pod: Pod, netns: string, podIps?: readonly string[], freshNetns?: boolean): Promise<string>;
  /** Differences between `netns` and the pod's expected rules; empty = in place. */
  verify(pod: Pod, netns: string): Promise<string[]>;
  /**
   * Continuous verification: what differs between `netns` and the plan for `pod`, classified;
   * `pod` undefined = a pod outside the mesh, whose netns must hold nothing of ours. `podIps`
   * (the pod's status IPs) decide the IP family without entering the netns. Opens `netns` through
   * the guard; throws `PodNetnsRefusedError` when it cannot (gone, or not a pod's).
   */
  inspect(pod: Pod | undefined, netns: string, podIps?: readonly string[]): Promise<Drift[]>;
  /** The rule backend in use: `nft`, `iptables-nft` or `iptables-legacy` (detected once). */
  backend(): Promise<string>;
  /** Re-programs the pod's rules, replacing whatever owned state differs (one restore per family / one nft transaction). */
  repair(pod: Pod, netns: string, podIps?: readonly string[]): Promise<string>;
  /** The addresses in `netns` (`ip -j addr show`, opened through the guard): whose netns it is before a repair. */
  addresses(netns: string): Promise<string[]>;
}

/** A Map that forgets its oldest entries beyond `limit`. */
class BoundedMap<K, V> extends Map<K, V> {
  readonly #limit: number;
  constructor(limit: number) {
    super();
    this.#limit = limit;
  }
  override set(key: K, value: V): this {
    super.set(key, value);
    while (this.size > this.#limit) {
      const oldest = this.keys().next();
      if (oldest.done) break;
      this.delete(oldest.value);
    }
    return this;
  }
}

/**
 * Sidecar capture for a long-running process (the agent) or a one-shot one (the plugin's
 * degraded mode). The iptables binaries are detected once, in the caller's network namespace
 * (upstream ambient does the same), and reused for every pod whose rules do not already live in
 * the other backend (`choosePodIptablesBackend`).
 */
export function createSidecarCaptureManager(options: SidecarCaptureManagerOptions): SidecarCaptureManager {
  const limit = options.cachedPlans ?? 64;
  const deps: SidecarCaptureDeps = {
    runner: options.runner,
    openScratchNetns: options.openScratchNetns,
    iptablesCanonicalCache: new BoundedMap<string, IptablesState>(limit),
    nftCanonicalCache: new BoundedMap<string, Map<string, string>>(limit),
  };
  let backend: Promise<IptablesBackend> | undefined;
  const iptablesBackend = (): Promise<IptablesBackend> => {
    backend ??= decideIptablesBackend(options.runner, {
      ...(options.forceIptablesBinary ? { forceBinary: options.forceIptablesBinary } : {}),
    })
      .then((decision) => {
        options.onBackendDecision?.(decision);
        return decision.backend;
      })
      .catch((err: unknown) => {
        backend = undefined; // a failed probe is retried on the next pod
        throw err;
      });
    return backend;
  };
  const renderedPlans = new WeakMap<Pod, { ipsKey: string; rulePlan: SidecarRulePlan; planKey: string }>();
  /**
   * Netns (path + inode) → the change token (nf_tables generation, or legacy tables fingerprint) at
   * which it last held exactly its plan.
   */
  const inPlaceAt = new BoundedMap<string, { token: number | string; planKey: string }>(4096);
  /** Netns (path + inode) → the backend its rules were last found in, when not the node's (adopted). */
  const foundIn = new BoundedMap<string, IptablesBackend>(4096);
  /**
   * What moves whenever the rules `where` holds may have changed: the nf_tables generation, or the
   * legacy IPv4 tables' fingerprint (only for a plan without IPv6 rules). `undefined`: no shortcut.
   */
  const changeToken = (handle: NetnsHandle, where: IptablesBackend | undefined, rulePlan: SidecarRulePlan | undefined) => {
    try {
      if (where === undefined || where.nfTables) return options.nftGenerations?.read(handle.fd);
      if (rulePlan !== undefined && rulePlan.backend !== 'iptables') return undefined;
      return options.legacyFingerprints?.fingerprint(handle.fd, iptablesFamiliesRead(rulePlan?.documents));
    } catch {
      return undefined; // no shortcut: the netns is read
    }
  };
  const nodeKind: SidecarRuleKind = options.nativeNftables ? 'nft' : 'iptables';
  /** Netns (path + inode) → the kind its capture was found in, when not the node's (captured before a switch). */
  const capturedIn = new BoundedMap<string, SidecarRuleKind>(4096);
  const plan = (pod: Pod, netns: string, kind: SidecarRuleKind = nodeKind) =>
    planSidecarCapture(pod, {
      netns,
      nativeNftables: kind === 'nft',
      ...(options.env ? { env: options.env } : {}),
    });
  const heldIn = (path: string) => sidecarRulesHeldIn(options.runner, { netns: path, node: nodeKind, iptables: iptablesBackend });
  const remember = (key: string, kind: SidecarRuleKind) => {
    if (kind === nodeKind) capturedIn.delete(key);
    else capturedIn.set(key, kind);
  };

  /** Opens and checks `netns` once; everything runs through that fd. */
  async function inNetns<T>(netns: string, fn: (path: string, key: string) => Promise<T>): Promise<T> {
    const handle = options.netnsGuard.openCniNetns(netns);
    try {
      return await handle.use((path) => fn(path, `${netns}\0${handle.inode}`));
    } finally {
      handle.close();
    }
  }

  function program(
    pod: Pod,
    netns: string,
    podIps: readonly string[] | undefined,
    reconcile: boolean,
    freshNetns: boolean,
  ): Promise<string> {
    return inNetns(netns, async (path, key) => {
      // A new netns gets the node's kind; a running pod is re-programmed in the kind it holds.
      const kind = freshNetns ? nodeKind : await heldIn(path);
      if (!freshNetns) remember(key, kind);
      const planned = plan(pod, path, kind);
      const extra = kind === 'nft' ? {} : { iptablesBackend: await iptablesBackend() };
      const { outcome } = await applySidecarCapture(deps, {
        ...planned,
        ...extra,
        reconcile,
        ...(podIps ? { podIps } : {}),
        ...(freshNetns ? { freshNetns } : {}),
      });
      return typeof outcome === 'string'
        ? outcome
        : Object.entries(outcome)
            .map(([family, o]) => `${family}:${o}`)
            .join(',');
    });
  }

  return {
    apply: (pod, netns, podIps, freshNetns) => program(pod, netns, podIps, false, freshNetns === true),
    repair: (pod, netns, podIps) => program(pod, netns, podIps, true, false),
    addresses: (netns) =>
      inNetns(netns, async (path) => {
        const { stdout } = await options.runner.run(['ip', '-j', 'addr', 'show'], { netns: path });
        return parseIpAddrJson(stdout).map((a) => a.address);
      }),
    backend: async () => (options.nativeNftables ? 'nft' : (await iptablesBackend()).nfTables ? 'iptables-nft' : 'iptables-legacy'),
    async inspect(pod, netns, podIps) {
      const handle = options.netnsGuard.openCniNetns(netns);
      try {
        return await handle.use(async (path) => {
          const key = `${netns}\0${handle.inode}`;
          const inspectIn = async (kind: SidecarRuleKind) => {
            const backend = kind === 'nft' ? ({ kind: 'nft' } as const) : { kind: 'iptables' as const, iptables: await iptablesBackend() };
            let rulePlan: SidecarRulePlan | undefined;
            let planKey = '';
            if (pod !== undefined) {
              // The plan of an unchanged pod object (the cache replaces it on every update) is rendered once.
              const ipsKey = `${kind}\0${(podIps ?? []).join(',')}`;
              const memo = renderedPlans.get(pod);
              if (memo !== undefined && memo.ipsKey === ipsKey) ({ rulePlan, planKey } = memo);
              else {
                const planned = plan(pod, path, kind);
                const dualStack = planned.dualStack === true;
                const ipv6 =
                  ipv6EnabledFromResultIps(podIps ?? [], dualStack) ?? (await detectPodIpv6(options.runner, path, { dualStack }));
                rulePlan = planned.plan({ ipv6 });
                planKey = JSON.stringify(rulePlan);
                // Only when the IP family came from the addresses: a probed netns may change (DHCPv6, late address).
                if (ipv6EnabledFromResultIps(podIps ?? [], dualStack) !== undefined) renderedPlans.set(pod, { ipsKey, rulePlan, planKey });
              }
            }
            const lastFoundIn = foundIn.get(key);
            // Where the rules were last found: the node's backend, or the one this pod was adopted from.
            const where = backend.kind === 'nft' ? undefined : (lastFoundIn ?? backend.iptables);
            const token = changeToken(handle, where, rulePlan);
            const seen = inPlaceAt.get(key);
            if (token !== undefined && seen?.token === token && seen.planKey === planKey) return undefined;
            const inspected = await inspectCapture(deps, { netns: path, plan: rulePlan, backend, ...(lastFoundIn ? { lastFoundIn } : {}) });
            return { backend, where, token, planKey, inspected };
          };
          const kind = capturedIn.get(key) ?? nodeKind;
          let result = await inspectIn(kind);
          if (result === undefined) return [];
          if (pod !== undefined && result.inspected.drift.length > 0) {
            // Judged against the kind the pod was captured with, never "repaired" into the other one on top.
            const held = await heldIn(path);
            remember(key, held);
            if (held !== kind) {
              foundIn.delete(key);
              result = await inspectIn(held);
              if (result === undefined) return [];
            }
          }
          const { backend, where, token, planKey, inspected } = result;
          const { drift } = inspected;
          if (backend.kind === 'iptables' && inspected.iptables !== undefined && inspected.iptables.flavor !== backend.iptables.flavor) {
            foundIn.set(key, inspected.iptables);
          } else foundIn.delete(key);
          // The token was read before the inspection: a change made during it moves the token, so it is
          // seen next time. Kept only when the rules were read where the token looks.
          if (token !== undefined && drift.length === 0 && inspected.iptables?.flavor === where?.flavor)
            inPlaceAt.set(key, { token, planKey });
          else inPlaceAt.delete(key);
          return drift;
        });
      } finally {
        handle.close();
      }
    },
    // CNI CHECK: through the guard like ADD, DEL and repair (the node's netns, or one that is no
    // netns at all, is refused before any command runs in it).
    verify: (pod, netns) =>
      inNetns(netns, async (path) => {
        const kind = await heldIn(path);
        const planned = plan(pod, path, kind);
        const ipv6 = await detectPodIpv6(options.runner, path, { dualStack: planned.dualStack === true });
        const extra = kind === 'nft' ? {} : { iptablesBackend: await iptablesBackend() };
        return verifySidecarCapture(deps, { netns: path, plan: planned.plan({ ipv6 }), ...extra });
      }),
  };
}
