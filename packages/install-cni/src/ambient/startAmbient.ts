import { retryWithBackoff } from '@istio-cni/kube';
import { ambientConfigFromOptions, ambientPodOverrides, type AmbientConfig, type Pod } from '@istio-cni/capture';
import {
  applyAmbientPodRules,
  createAmbientHostRules,
  createBranchEniProbeRules,
  createExecCommandRunner,
  openNetnsOwnerUserns,
  createIpsetProbeSets,
  createNetnsOwnershipCheck,
  listNetnsAddresses,
  createLegacyTablesFingerprinter,
  createNftGenerationReader,
  createNftProbeSets,
  createPodNetnsCache,
  createPodNetnsGuard,
  createPodNetnsProcFinder,
  createPodProcessNetnsLocator,
  createNetnsDir,
  createProcFs,
  createScratchNetnsOpener,
  createZtunnelServer,
  deleteAmbientHostRules,
  verifyAmbientHostRules,
  findKubeletUid,
  syncProbeSets,
  type AmbientPod,
  type AmbientRuleBackend,
  type AmbientRulesDeps,
  type PodNetnsProcFinder,
  type PodProcessNetnsLocator,
  type ZtunnelServer,
} from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import { Counter, Gauge, type Registry } from 'prom-client';
import { errorMessage } from '@istio-cni/cni';
import type { ClusterView } from '../kube/clusterView.ts';
import type { PodAnnotator } from '../kube/podStatusAnnotator.ts';
import { createAmbientReconciler, isZtunnelPod, type AmbientPolicy, type AmbientReconciler } from './ambientReconciler.ts';
import { isTerminal, podIps, redirectionState, type MeshDataplane } from './meshDataplane.ts';
import { decideNodeIptables } from './decideNodeIptables.ts';
import { createNodeMeshDataplane, workloadOf } from './nodeMeshDataplane.ts';
import { createAmbientVerifier, type AmbientVerifier } from './ambientVerifier.ts';
import { syncBranchEniProbeRules } from './syncBranchEniProbeRules.ts';

export interface AmbientOptions {
  view: ClusterView;
  /** Resolves when the informers are synced. */
  synced: Promise<void>;
  annotator: PodAnnotator;
  policy: AmbientPolicy;
  ztunnelUdsAddress: string;
  /** HOST_PROC_DIR, e.g. `/host/proc`. */
  hostProcDir: string;
  /** HOST_NETNS_DIR: searched for enrolled pods whose netns no process holds; not searched when absent. */
  hostNetnsDir?: string;
  /** ALLOW_SWITCH_TO_HOST_NS: host rules and sets go into the host netns (`hostNetnsPath`). */
  switchToHostNetns: boolean;
  /**
   * The host's netns file. Default `<hostProcDir>/1/ns/net`; when that is unreadable the procfs
   * scan falls back to the agent's own netns (with a warning).
   */
  hostNetnsPath?: string;
  nativeNftables: boolean;
  forceIptablesBinary?: string;
  dnsCapture: boolean;
  ipv6: boolean;
  reconcilePodRules: boolean;
  hostProbeSnatIp?: string;
  hostProbeSnatIpv6?: string;
  /** AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE: probe rules for AWS branch ENI pods (Security Groups for Pods). */
  awsBranchEniProbe: boolean;
  logger: Logger;
  registry: Registry;
  /** Every change of the number of connected ztunnels (the readiness taint waits for the first). */
  onZtunnelConnections?: (count: number) => void;
}

export interface Ambient {
  dataplane: MeshDataplane;
  /** Resolves when the start-up reconciliation is done and ztunnel may connect (upstream `server.go` `Start`). */
  ready: Promise<void>;
  isReady(): boolean;
  /** Continuous verification of ambient pods (driven by the agent's verification loop). */
  verifier: AmbientVerifier;
  ztunnelConnections(): number;
  /** `cleanup`: remove host rules and sets (not an upgrade, upstream `ShouldStopCleanup`). Closes ZDS either way. */
  stop(cleanup: boolean): Promise<void>;
}

/** The directory the host's filesystem is mounted at, derived from HOST_PROC_DIR (`/host/proc` → `/host`). */
export function hostRootOf(hostProcDir: string): string {
  const root = hostProcDir.replace(/\/+$/, '').replace(/\/proc$/, '');
  return root === '' ? '/' : root;
}

function ambientPod(pod: Pod): AmbientPod {
  const w = workloadOf(pod);
  return { uid: pod.metadata.uid ?? '', name: w.name, namespace: w.namespace, serviceAccount: w.serviceAccount, ips: podIps(pod) };
}

function withRetries<T>(what: string, attempts: number, delayMs: number, log: Logger, fn: () => Promise<T>): Promise<T> {
  return retryWithBackoff(fn, {
    policy: { initialMs: delayMs, maxMs: delayMs },
    maxAttempts: attempts,
    classify: () => ({ retry: true }),
    onRetry: (err, attempt) => log.warn(`${what} failed; retrying`, { attempt, error: errorMessage(err) }),
  });
}

/**
 * The ambient node agent (upstream `cni/pkg/nodeagent`): host rules and probe sets, the ZDS server, the enrolment
 * dataplane, informer reconciliation and the start-up snapshot. Constructed before the plugin is
 * installed; `ready` gates readiness.
 */
export async function startAmbient(o: AmbientOptions): Promise<Ambient> {
  const log = o.logger;
  const runner = createExecCommandRunner({ netnsOwner: openNetnsOwnerUserns });
  const config: AmbientConfig = ambientConfigFromOptions({
    enableIPv6: o.ipv6,
    redirectDns: o.dnsCapture,
    reconcile: o.reconcilePodRules,
    ...(o.hostProbeSnatIp ? { hostProbeSnatIp: o.hostProbeSnatIp } : {}),
    ...(o.hostProbeSnatIpv6 ? { hostProbeSnatIpv6: o.hostProbeSnatIpv6 } : {}),
  });
  const hostNetns = o.switchToHostNetns ? (o.hostNetnsPath ?? `${o.hostProcDir}/1/ns/net`) : undefined;
  const rules: AmbientRulesDeps = { runner, openScratchNetns: createScratchNetnsOpener() };
  const backend: AmbientRuleBackend = o.nativeNftables
    ? { kind: 'nft' }
    : { kind: 'iptables', iptables: await decideNodeIptables(runner, hostNetns, o.forceIptablesBinary, log) };
  const procFs = createProcFs(o.hostProcDir);
  const sets = o.nativeNftables
    ? createNftProbeSets({ runner, config, ...(hostNetns ? { netns: hostNetns } : {}) })
    : createIpsetProbeSets({ runner, config, ...(hostNetns ? { netns: hostNetns } : {}) });
  const kubeletUid = o.nativeNftables ? await findKubeletUid(procFs) : undefined;
  const branchEni = o.awsBranchEniProbe
    ? createBranchEniProbeRules({
        runner,
        hostProcDir: o.hostProcDir,
        ...(hostNetns ? { netns: hostNetns } : {}),
        log: (level, msg, fields) => log[level](msg, fields),
      })
    : undefined;
  const hostRules = { config, backend, ...(hostNetns ? { hostNetns } : {}), ...(kubeletUid !== undefined ? { kubeletUid } : {}) };

  // Probe sets are not flushed here (upstream does): the snapshot sync below prunes what is stale,
  // so probes of already-enrolled pods keep working through an agent restart.
  await withRetries('creating host probe sets and rules', 11, 2000, log, async () => {
    await sets.create();
    await createAmbientHostRules(rules, hostRules);
  });

  const cache = createPodNetnsCache();
  const netnsGuard = createPodNetnsGuard({
    hostProcDir: o.hostProcDir,
    hostRoot: hostRootOf(o.hostProcDir),
    ...(o.hostNetnsPath !== undefined ? { hostNetnsPath: o.hostNetnsPath } : {}),
  });
  const connected = new Gauge({
    name: 'ztunnel_connected',
    help: 'Number of ztunnels connected to the node agent.',
    registers: [o.registry],
  });
  const reconcileEvents = new Counter({
    name: 'nodeagent_reconcile_events_total',
    help: 'Pod events processed by the ambient node agent.',
    labelNames: ['type'],
    registers: [o.registry],
  });
  const ztunnel: ZtunnelServer = createZtunnelServer({
    path: o.ztunnelUdsAddress,
    pods: {
      readCurrentPodSnapshot: () =>
        new Map(
          cache.snapshot().map((e) => [e.uid, { workload: e.workload, ...(e.netns && !e.netns.closed ? { netnsFd: e.netns.fd } : {}) }]),
        ),
    },
    logger: log.with({ component: 'ztunnel-server' }),
    onConnectionCount: (n) => {
      connected.set(n);
      o.onZtunnelConnections?.(n);
    },
  });

  let finder: Promise<PodNetnsProcFinder> | undefined;
  const checkOwnership = createNetnsOwnershipCheck(runner);
  const scanOptions = {
    procFs,
    checkOwnership,
    log: (level: 'debug' | 'warn', msg: string) => log[level](msg),
    ...(o.hostNetnsPath !== undefined ? { hostNetnsPath: o.hostNetnsPath } : {}),
  };
  const getFinder = () =>
    (finder ??= createPodNetnsProcFinder({
      ...scanOptions,
      ...(o.hostNetnsDir !== undefined
        ? { netnsDir: { dir: createNetnsDir(o.hostNetnsDir), listAddresses: (netns) => listNetnsAddresses(runner, netns) } }
        : {}),
    }));
  let locator: Promise<PodProcessNetnsLocator> | undefined;
  const getLocator = () => (locator ??= createPodProcessNetnsLocator(scanOptions));
  const dataplane = createNodeMeshDataplane({
    rules,
    backend,
    config,
    cache,
    finder: getFinder,
    checkOwnership,
    netnsGuard,
    sets,
    ...(branchEni ? { branchEni } : {}),
    ztunnel,
    annotator: o.annotator,
    logger: log,
  });
  const reconciler: AmbientReconciler = createAmbientReconciler({
    view: o.view,
    dataplane,
    policy: o.policy,
    logger: log,
    countEvent: (type) => reconcileEvents.inc({ type }),
  });

  let ready = false;
  const readyPromise = (async () => {
    await o.synced;
    // As upstream `server.go` `Start`: the pods this node had enrolled, as the API last saw them.
    const snapshot = o.view
      .listPods()
      .filter((p) => !isZtunnelPod(p, o.policy.systemNamespace) && !isTerminal(p) && redirectionState(p) === 'enabled');
    const sync = await syncProbeSets(sets, snapshot.map(ambientPod));
    log.info('probe sets synced with the enrolled pods', {
      pods: snapshot.length,
      added: sync.added.length,
      pruned: sync.pruned.length,
      pruneSkipped: sync.pruneSkipped,
    });
    for (const e of sync.errors) log.warn('probe set sync', { error: e });
    // As upstream, where the snapshot's probe-set sync also adds them.
    for (const p of snapshot)
      await syncBranchEniProbeRules(branchEni, 'add', podIps(p), log.with({ pod: `${p.metadata.namespace}/${p.metadata.name}` }));
    for (const p of snapshot) cache.ensure(p.metadata.uid ?? '', workloadOf(p));
    const wanted = new Map(snapshot.map((p) => [p.metadata.uid ?? '', ambientPod(p)]));
    const found = await (await getFinder()).findNetnsForPods(wanted);
    for (const [uid, hit] of found) {
      try {
        netnsGuard.check(hit.netns);
      } catch (err) {
        hit.netns.close();
        log.error('refusing the network namespace found for an enrolled pod', {
          uid,
          error: err instanceof Error ? err.message : String(err),
        });
        continue;
      }
      const netns = cache.upsert(uid, workloadOf(snapshot.find((p) => p.metadata.uid === uid) as Pod), hit.netns);
      if (o.reconcilePodRules) {
        const pod = snapshot.find((p) => p.metadata.uid === uid) as Pod;
        try {
          const { overrides } = ambientPodOverrides(pod);
          await applyAmbientPodRules(rules, { netns, config, backend, overrides, reconcile: true });
        } catch (err) {
          log.warn('failed to reconcile in-pod rules', { pod: `${pod.metadata.namespace}/${pod.metadata.name}`, error: String(err) });
        }
      }
    }
    log.info('found network namespaces of enrolled pods', { enrolled: snapshot.length, found: found.size });
    reconciler.start();
    reconciler.resyncAll();
    ztunnel.start();
    ready = true;
  })();
  readyPromise.catch((err: unknown) => log.error('ambient start-up failed', { error: errorMessage(err) }));

  return {
    dataplane,
    verifier: createAmbientVerifier({
      view: o.view,
      policy: o.policy,
      cache,
      rules,
      backend,
      config,
      sets,
      ztunnel,
      annotator: o.annotator,
      enrol: (pod, ips) => dataplane.addPodToMesh(pod, ips, undefined),
      sandboxes: { locator: getLocator, replace: (pod, ips) => dataplane.replaceNetns(pod, ips) },
      nftGenerations: createNftGenerationReader(),
      legacyFingerprints: createLegacyTablesFingerprinter(),
      hostRules: {
        verify: () => verifyAmbientHostRules(rules, hostRules),
        // The probe sets first: a reload that removed the host table took the nft sets with it (the
        // pods' entries come back through their own checks in the same pass).
        repair: async () => {
          await sets.create();
          await createAmbientHostRules(rules, hostRules);
        },
      },
    }),
    ztunnelConnections: () => ztunnel.connectionCount(),
    ready: readyPromise,
    isReady: () => ready,
    async stop(cleanup) {
      reconciler.stop();
      await ztunnel.close().catch(() => undefined);
      if (cleanup) {
        await deleteAmbientHostRules(rules, hostRules).catch((err: unknown) =>
          log.warn('failed to delete host rules', { error: String(err) }),
        );
        await sets.destroy().catch((err: unknown) => log.warn('failed to destroy probe sets', { error: String(err) }));
        // From memory, not detected again: aws-vpc-cni may have removed its own rules already.
        for (const o of (await branchEni?.flush()) ?? []) {
          if (o.error !== undefined) log.debug('failed to remove branch ENI probe rules', { ip: o.ip, error: o.error });
        }
      }
      cache.closeAll();
    },
  };
}
