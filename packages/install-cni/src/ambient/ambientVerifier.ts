import { monotonicNow } from '@istio-cni/kube';
import { ambientPodOverrides, type AmbientConfig, type AmbientPodOverrides, type Pod } from '@istio-cni/capture';
import { errorMessage } from '@istio-cni/cni';
import {
  applyAmbientPodRules,
  compareAmbientEnrolment,
  type AmbientPodRulePlan,
  type AmbientRuleBackend,
  type AmbientRulesDeps,
  type Drift,
  inspectCapture,
  type InspectedCapture,
  iptablesFamiliesRead,
  type LegacyTablesFingerprinter,
  readFromNfTables,
  type NetnsHandle,
  type PodNetnsCache,
  type PodProcessNetns,
  type PodProcessNetnsLocator,
  type SharedProcessScan,
  shareProcessScan,
  type ProbeSetEntry,
  planAmbientPodRules,
  type ProbeSetManager,
  type ZtunnelServer,
} from '@istio-cni/dataplane';
import type { ClusterView } from '../kube/clusterView.ts';
import type { PodAnnotator } from '../kube/podStatusAnnotator.ts';
import type { VerificationTarget, VerifyOutcome } from '../agent/verificationLoop.ts';
import { isZtunnelPod, shouldBeEnrolled, type AmbientPolicy } from './ambientReconciler.ts';
import { isTerminal, podIps, REDIRECTION_ANNOTATION, redirectionState } from './meshDataplane.ts';
import { workloadOf } from './nodeMeshDataplane.ts';

export interface AmbientVerifierDeps {
  view: Pick<ClusterView, 'getPod' | 'getNamespace' | 'listPods'>;
  policy: AmbientPolicy;
  cache: Pick<PodNetnsCache, 'get' | 'has'>;
  rules: AmbientRulesDeps;
  backend: AmbientRuleBackend;
  config: AmbientConfig;
  sets: Pick<ProbeSetManager, 'list' | 'addPod'>;
  ztunnel: Pick<ZtunnelServer, 'hasPod' | 'podAdded'>;
  annotator: PodAnnotator;
  /** Enrols a pod whose netns the agent does not hold, finding it by the pod's IPs (`addPodToMesh` without a netns path). */
  enrol(pod: Pod, ips: readonly string[]): Promise<void>;
  /** In-pod rules: compared and re-applied through the pod's netns (default: the real dataplane). */
  podRules?: AmbientPodRulesAccess;
  /** Skips reading in-pod rules while the netns's nf_tables generation has not moved (as for sidecar pods). */
  nftGenerations?: { read(netnsFd: number): number };
  /** The same on iptables-legacy: the fingerprint of the netns's legacy tables of the plan's families. */
  legacyFingerprints?: Pick<LegacyTablesFingerprinter, 'fingerprint'>;
  /**
   * The longest one probe-set listing serves the pods checked meanwhile. A listing is taken afresh at
   * each pass (`targets()`) anyway, so at most one `ipset save` / `nft list set` runs per pass.
   */
  probeSetListTtlMs?: number;
  now?: () => number;
  /**
   * The node's host probe rules (the POSTROUTING jump and SNAT of kubelet's probes into enrolled
   * pods): checked once per pass and repaired as at start-up. A firewalld reload or an operator's
   * `iptables -t nat -F` removes them, and every ambient pod's probes fail until they are back.
   */
  hostRules?: HostRulesAccess;
  /**
   * Whether the netns held for a pod is still the one it runs in (upstream's periodic re-enrolment
   * check, PR 61183): a sandbox re-created under the same UID with no ADD reaching this agent leaves
   * the pod uncaptured, its rules and ztunnel's proxy in the old netns.
   */
  sandboxes?: SandboxAccess;
}

export interface SandboxAccess {
  /** Where the pods' processes run (`/proc`), made on first use. */
  locator(): Promise<PodProcessNetnsLocator>;
  /** Enrols the pod's current netns in place of the held one (`MeshDataplane.replaceNetns`). */
  replace(pod: Pod, ips: readonly string[]): Promise<void>;
}

export interface HostRulesAccess {
  /** Differences from the plan; empty when in place (`verifyAmbientHostRules`). */
  verify(): Promise<string[]>;
  /** Puts the plan back, replacing what differs (`createAmbientHostRules`). */
  repair(): Promise<void>;
}

/** The verification target of the host probe rules. */
export const HOST_RULES_TARGET: VerificationTarget = { key: 'ambient/node/host-probe-rules', pod: 'host probe rules', scope: 'node' };

export interface AmbientPodRulesAccess {
  /** The drift, and where the rules were read (`inspectCapture`). */
  inspect(netnsPath: string, plan: AmbientPodRulePlan): Promise<InspectedCapture>;
  repair(netns: NetnsHandle, overrides: AmbientPodOverrides): Promise<void>;
}

export interface AmbientVerifier {
  /** Ambient pods to check: those this agent enrolled, any other selected for ambient or carrying the redirection annotation. */
  targets(): VerificationTarget[];
  verify(target: VerificationTarget): Promise<VerifyOutcome>;
}

interface RenderedPlan {
  overrides: AmbientPodOverrides;
  plan: AmbientPodRulePlan;
  planKey: string;
}

function indexByUid(entries: readonly ProbeSetEntry[]): Map<string, string[]> {
  const byUid = new Map<string, string[]>();
  for (const e of entries) {
    if (e.uid === undefined) continue;
    const ips = byUid.get(e.uid);
    if (ips === undefined) byUid.set(e.uid, [e.ip]);
    else ips.push(e.ip);
  }
  return byUid;
}

const keyPrefix = 'ambient/';
const podName = (p: Pod) => `${p.metadata.namespace}/${p.metadata.name}`;

/**
 * Continuous verification of ambient enrolment: in-pod rules (through the netns the agent holds
 * open), probe-set membership, the connected ztunnel's ack and the annotation; and no annotation on
 * a pod outside the mesh. Repairs each piece as `addPodToMesh` would (rules reconciled, the pod
 * re-sent to ztunnel, its IPs re-added, the annotation re-written) or removes a stale annotation.
 * A pod whose selection changed is left to the informers (`ambientReconciler.ts`).
 */
export function createAmbientVerifier(deps: AmbientVerifierDeps): AmbientVerifier {
  const now = deps.now ?? monotonicNow;
  /** uid + netns inode → the change token at which its in-pod rules were last found in place. */
  const rulesInPlaceAt = new Map<string, { token: number | string; planKey: string }>();
  const { backend } = deps;
  const nftBased = backend.kind === 'nft' || backend.iptables.nfTables;
  /** What moves whenever the pod's rules may have changed: the nf_tables generation, or the legacy tables' fingerprint. */
  const changeToken = (netns: NetnsHandle, plan: AmbientPodRulePlan): number | string | undefined => {
    try {
      if (nftBased) return deps.nftGenerations?.read(netns.fd);
      if (plan.backend !== 'iptables') return undefined;
      return deps.legacyFingerprints?.fingerprint(netns.fd, iptablesFamiliesRead(plan.documents));
    } catch {
      return undefined; // no shortcut: the rules are read
    }
  };
  /** Whether the rules were read where the token looks (not in another backend the pod was adopted from). */
  const readWhereTokenLooks = (inspected: InspectedCapture): boolean =>
    nftBased ? readFromNfTables(inspected) : backend.kind === 'iptables' && inspected.iptables?.flavor === backend.iptables.flavor;
  const podRules: AmbientPodRulesAccess = deps.podRules ?? {
    inspect: (path, plan) => inspectCapture(deps.rules, { netns: path, plan, backend, nftTablePrefix: 'istio-ambient-' }),
    repair: async (netns, overrides) => {
      await applyAmbientPodRules(deps.rules, { netns, config: deps.config, backend: deps.backend, overrides, reconcile: true });
    },
  };
  /** One probe-set listing, by pod UID, shared by the pods of a pass. */
  let listing: { at: number; byUid: Promise<Map<string, string[]>> } | undefined;
  const probeSetIpsOf = async (uid: string): Promise<string[]> => {
    if (listing === undefined || now() - listing.at > (deps.probeSetListTtlMs ?? 60_000)) {
      const byUid = deps.sets.list().then(indexByUid);
      const taken = { at: now(), byUid };
      listing = taken;
      byUid.catch(() => {
        if (listing === taken) listing = undefined;
      });
    }
    return (await listing.byUid).get(uid) ?? [];
  };
  /** One procfs scan per pass, like the listing; a pod's process seen in its held netns is re-read alone. */
  let processScan: SharedProcessScan | undefined;
  const owners = new Map<string, PodProcessNetns>();
  const podProcessOf = async (locator: PodProcessNetnsLocator, uid: string, fresh: boolean): Promise<PodProcessNetns | undefined> => {
    processScan ??= shareProcessScan(() => locator.scan(), deps.probeSetListTtlMs ?? 60_000, now);
    return (await processScan.get(fresh)).get(uid);
  };

  /** `netns_replaced` when the pod's oldest process runs in another netns than the one held for it. */
  async function replacedNetns(
    access: SandboxAccess,
    pod: Pod,
    netns: NetnsHandle,
    ips: readonly string[],
  ): Promise<VerifyOutcome | undefined> {
    const uid = pod.metadata.uid ?? '';
    const locator = await access.locator();
    const known = owners.get(uid);
    if (known?.inode === netns.inode && (await locator.stillIn(known))) return undefined;
    let current = await podProcessOf(locator, uid, false);
    // The shared scan may predate an ADD that gave the agent the pod's new netns: only a fresh one can tell.
    if (current !== undefined && current.inode !== netns.inode) current = await podProcessOf(locator, uid, true);
    owners.delete(uid);
    // No process of the pod here (a sandbox between two, a runtime without the UID in its cgroups): nothing to compare.
    if (current === undefined) return undefined;
    if (current.inode === netns.inode) {
      owners.set(uid, current);
      return undefined;
    }
    const detail = `the network namespace held for the pod (inode ${netns.inode}) is no longer the one it runs in (inode ${current.inode})`;
    if (!(await locator.carries(current, ips))) {
      // As the /proc finder: a netns is never taken as the pod's unless it holds one of its IPs.
      const noIps = `${detail}, which carries none of its IPs in the API (${ips.join(', ')}); enrolled once it does`;
      return { status: 'drift', drift: [{ kind: 'netns_replaced', detail: noIps }] };
    }
    return {
      status: 'drift',
      drift: [{ kind: 'netns_replaced', detail }],
      repair: async () => {
        await access.replace(pod, ips);
        listing = undefined;
      },
    };
  }

  /**
   * The rendered plan and its key per version of a pod object (the cache replaces the object on
   * every update); pods with the same overrides share one plan and one key string.
   */
  const plans = new WeakMap<Pod, RenderedPlan>();
  const plansByOverrides = new Map<string, RenderedPlan>();
  const renderedPlan = (pod: Pod): RenderedPlan => {
    const memo = plans.get(pod);
    if (memo !== undefined) return memo;
    const { overrides } = ambientPodOverrides(pod);
    const overridesKey = JSON.stringify(overrides);
    let rendered = plansByOverrides.get(overridesKey);
    if (rendered === undefined) {
      const plan = planAmbientPodRules(deps.config, deps.backend, overrides);
      rendered = { overrides, plan, planKey: JSON.stringify(plan) };
      // Overrides come from annotations: bounded so that hostile ones cannot grow it without end.
      if (plansByOverrides.size >= 256) plansByOverrides.clear();
      plansByOverrides.set(overridesKey, rendered);
    }
    plans.set(pod, rendered);
    return rendered;
  };

  function candidates(): Pod[] {
    return deps.view
      .listPods()
      .filter(
        (p) =>
          !isZtunnelPod(p, deps.policy.systemNamespace) &&
          (deps.cache.has(p.metadata.uid ?? '') ||
            redirectionState(p) !== undefined ||
            shouldBeEnrolled(p, deps.view.getNamespace(p.metadata.namespace ?? ''), deps.policy)),
      );
  }

  async function verifyHostRules(access: HostRulesAccess): Promise<VerifyOutcome> {
    let differences: string[];
    try {
      differences = await access.verify();
    } catch (err) {
      return { status: 'unverifiable', error: errorMessage(err) };
    }
    if (differences.length === 0) return { status: 'ok' };
    return { status: 'drift', drift: differences.map((detail) => ({ kind: 'host_rules', detail })), repair: () => access.repair() };
  }

  async function verifyPod(pod: Pod): Promise<VerifyOutcome> {
    const uid = pod.metadata.uid ?? '';
    if (pod.metadata.deletionTimestamp) return { status: 'skipped', reason: 'pod is being deleted' };
    if (isTerminal(pod)) return { status: 'skipped', reason: 'pod has terminated' };
    const namespace = deps.view.getNamespace(pod.metadata.namespace ?? '');
    // Its watch lags the pods': nothing can be concluded about selection until it arrives.
    if (namespace === undefined) return { status: 'skipped', reason: 'namespace not in the cache yet' };
    const should = shouldBeEnrolled(pod, namespace, deps.policy);
    const annotation = pod.metadata.annotations?.[REDIRECTION_ANNOTATION];
    if (!should) {
      // Still enrolled here: the informers are removing it. Otherwise the annotation outlived enrolment.
      if (deps.cache.has(uid)) return { status: 'skipped', reason: 'no longer selected for ambient; the informers remove it' };
      const drift = compareAmbientEnrolment(false, { probeSetIps: [], annotation, ztunnelHasPod: undefined }, []);
      if (drift.length === 0) return { status: 'ok' };
      return {
        status: 'drift',
        drift,
        confirm: false,
        repair: () => deps.annotator.annotate(pod.metadata.namespace ?? '', pod.metadata.name ?? '', REDIRECTION_ANNOTATION, null),
      };
    }
    const ips = podIps(pod);
    const netns = deps.cache.get(uid);
    if (netns === undefined || netns.closed) {
      // No IP: no sandbox with a network yet, the ADD (or the informers once it has one) enrols it.
      if (ips.length === 0) return { status: 'skipped', reason: 'selected for ambient; no IP yet' };
      // After a reboot or an ADD that did not reach this agent: the annotation alone proves nothing.
      const detail =
        annotation === undefined
          ? 'selected for ambient, but this agent holds no network namespace for it'
          : `redirection annotation is ${JSON.stringify(annotation)}, but this agent holds no network namespace for it`;
      return { status: 'drift', drift: [{ kind: 'not_enrolled', detail }], repair: () => deps.enrol(pod, ips) };
    }

    if (deps.sandboxes !== undefined) {
      try {
        const replaced = await replacedNetns(deps.sandboxes, pod, netns, ips);
        if (replaced !== undefined) return replaced;
      } catch (err) {
        return { status: 'unverifiable', error: errorMessage(err) };
      }
    }

    const { overrides, plan, planKey } = renderedPlan(pod);
    let drift: Drift[];
    try {
      const key = `${uid}\0${netns.inode}`;
      // Read before the inspection: a change made during it moves the token, so it is seen next time.
      const token = changeToken(netns, plan);
      const seen = rulesInPlaceAt.get(key);
      if (token !== undefined && seen?.token === token && seen.planKey === planKey) drift = [];
      else {
        const inspected = await netns.use((path) => podRules.inspect(path, plan));
        drift = inspected.drift;
        // A pod whose rules live in another backend (adopted) is read every time: its changes do not move the token.
        if (token !== undefined && drift.length === 0 && readWhereTokenLooks(inspected)) rulesInPlaceAt.set(key, { token, planKey });
        else rulesInPlaceAt.delete(key);
      }
      // ipset prints canonical addresses; a status IP may carry a prefix length in tests and old APIs.
      const wanted = ips.map((ip) => ip.split('/')[0] ?? ip).filter((ip) => deps.config.enableIPv6 || !ip.includes(':'));
      let inSet = await probeSetIpsOf(uid);
      if (wanted.some((ip) => !inSet.includes(ip))) {
        // The shared listing may predate this pod's enrolment: only a fresh one can say it is missing.
        listing = undefined;
        inSet = await probeSetIpsOf(uid);
      }
      drift.push(...compareAmbientEnrolment(true, { probeSetIps: inSet, annotation, ztunnelHasPod: deps.ztunnel.hasPod(uid) }, wanted));
    } catch (err) {
      return { status: 'unverifiable', error: errorMessage(err) };
    }
    if (drift.length === 0) return { status: 'ok' };
    const kinds = new Set(drift.map((d) => d.kind));
    return {
      status: 'drift',
      drift,
      confirm: !kinds.has('annotation'),
      repair: async () => {
        if (kinds.has('rules_missing') || kinds.has('rules_changed')) await podRules.repair(netns, overrides);
        if (kinds.has('ztunnel')) await netns.use(() => deps.ztunnel.podAdded(uid, workloadOf(pod), netns.fd));
        if (kinds.has('probe_set')) {
          await deps.sets.addPod(uid, ips);
          listing = undefined;
        }
        if (kinds.has('annotation')) {
          await deps.annotator.annotate(pod.metadata.namespace ?? '', pod.metadata.name ?? '', REDIRECTION_ANNOTATION, 'enabled');
        }
      },
    };
  }

  return {
    targets: () => {
      // A new pass: its pods share one fresh probe-set listing.
      listing = undefined;
      processScan?.drop();
      for (const uid of owners.keys()) if (!deps.cache.has(uid)) owners.delete(uid);
      for (const k of rulesInPlaceAt.keys()) if (!deps.cache.has(k.split('\0')[0] ?? '')) rulesInPlaceAt.delete(k);
      const pods = candidates().map((p) => ({ key: `${keyPrefix}${p.metadata.uid ?? podName(p)}`, pod: podName(p) }));
      return deps.hostRules === undefined ? pods : [HOST_RULES_TARGET, ...pods];
    },
    async verify(target) {
      if (target.key === HOST_RULES_TARGET.key && deps.hostRules !== undefined) return verifyHostRules(deps.hostRules);
      const [namespace = '', name = ''] = target.pod.split('/');
      const pod = deps.view.getPod(namespace, name);
      if (pod === undefined || `${keyPrefix}${pod.metadata.uid ?? podName(pod)}` !== target.key) {
        return { status: 'skipped', reason: 'pod no longer in the cache' };
      }
      return verifyPod(pod);
    },
  };
}
