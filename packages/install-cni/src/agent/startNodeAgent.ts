import { statSync } from 'node:fs';
import { captureEnvironmentFrom, type EnablementSelector } from '@istio-cni/capture';
import {
  createExecCommandRunner,
  openNetnsOwnerUserns,
  createLegacyTablesFingerprinter,
  createNftGenerationReader,
  createPodNetnsGuard,
  resolveCniNetnsPath,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
} from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';
import type { Registry } from 'prom-client';
import { createKubeClient, type KubeClient, loadKubeConfig, nodePath, type KubeConfigSource } from '@istio-cni/kube';
import { watchCluster, type ClusterWatch, type PodWatch } from '../kube/watchCluster.ts';
import { createDaemonSetLookup } from '../kube/daemonSetLookup.ts';
import { createPodAnnotator } from '../kube/podStatusAnnotator.ts';
import type { DaemonSetLookup } from '../installer/upgradeSafety.ts';
import type { MeshDataplane } from '../ambient/meshDataplane.ts';
import { startAmbient, type Ambient, type AmbientOptions } from '../ambient/startAmbient.ts';
import { createAttachmentSaver, loadAttachments } from './attachmentStore.ts';
import { createAgentMetrics, createVerificationMetrics } from './agentMetrics.ts';
import { createConcurrencyLimiter } from './concurrencyLimiter.ts';
import type { HandoffHandler } from './handoffServer.ts';
import { createNodeAgentHandler } from './nodeAgentHandler.ts';
import type { DaemonState, DoctorPod } from '../doctor/doctorReport.ts';
import { createPodVerifier } from './podVerifier.ts';
import { createSidecarAdoption } from './sidecarAdoption.ts';
import { createSandboxRelocator } from './sandboxRelocator.ts';
import { createVerificationLoop, type VerificationLoop, type VerificationTarget, type VerifyOutcome } from './verificationLoop.ts';

export interface NodeAgentOptions {
  kube: KubeConfigSource;
  nodeName: string;
  /** POD_NAMESPACE: the agent's own namespace. */
  podNamespace: string;
  excludeNamespaces: readonly string[];
  ambientEnabled: boolean;
  ambientSelectors: readonly EnablementSelector[];
  nativeNftables: boolean;
  forceIptablesBinary?: string;
  /** HOST_PROC_DIR: the node's netns (`<hostProcDir>/1/ns/net`) is never a pod's. */
  hostProcDir: string;
  /** ISTIO_OUTBOUND_* variables (upstream `tools/common/config/config.go`), read once at start-up. */
  captureEnv: Record<string, string | undefined>;
  /** Simultaneous capture programs; more wait in line, up to `maxQueued`. */
  concurrency?: number;
  maxQueued?: number;
  logger: Logger;
  registry: Registry;
  /** `undefined` when the installer is ready, else why not. */
  installerNotReady(): string | undefined;
  /** Where the tracked attachments are kept across restarts (`<run dir>/attachments.json`); none when absent. */
  attachmentsFile?: string;
  /** VERIFY_INTERVAL in milliseconds (default 60 s; 0 = no periodic passes). */
  verifyIntervalMs?: number;
  /** VERIFY_REPORT_ONLY. */
  verifyReportOnly?: boolean;
  /** Ambient settings; required when `ambientEnabled`. */
  ambient?: Omit<AmbientOptions, 'view' | 'synced' | 'annotator' | 'policy' | 'logger' | 'registry'> & { systemNamespace: string };
}

export interface NodeAgent {
  handler: HandoffHandler;
  /** Resolves once the informers are synced and, with ambient, the start-up reconciliation ran. */
  ready: Promise<void>;
  notReadyReason(): string | undefined;
  /** This node's pod informer, which repair shares when its selectors are the same. */
  pods: PodWatch;
  /** The DaemonSet lookup for the upgrade-safe shutdown (sidecar and ambient). */
  upgradeLookup: DaemonSetLookup;
  /** Continuous verification of the pods this agent handled. */
  verification: VerificationLoop;
  /** What `install-cni doctor` shows of the agent: every pod (or `pod`, `ns/name`) checked now, nothing repaired. */
  doctor(pod?: string): Promise<Pick<DaemonState, 'backend' | 'ambient' | 'pods'>>;
  /** `cleanup`: not an upgrade, so node-level ambient state (host rules, probe sets) goes too. */
  stop(cleanup: boolean): Promise<void>;
}

/** The inode of the netns file at a CNI_NETNS path (mounted at its own path in the agent's container). */
function netnsInode(netns: string): number | undefined {
  const path = resolveCniNetnsPath(netns);
  if (path === undefined) return undefined;
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
}

export function startNodeAgent(options: NodeAgentOptions): NodeAgent {
  const kube = createKubeClient(loadKubeConfig(options.kube));
  const cluster = watchCluster(kube, { nodeName: options.nodeName, logger: options.logger, namespaces: options.ambientEnabled });
  const runner = createExecCommandRunner({ netnsOwner: openNetnsOwnerUserns });
  const capture = createSidecarCaptureManager({
    runner,
    openScratchNetns: createScratchNetnsOpener(),
    netnsGuard: createPodNetnsGuard({ hostProcDir: options.hostProcDir }),
    nativeNftables: options.nativeNftables,
    env: captureEnvironmentFrom(options.captureEnv),
    nftGenerations: createNftGenerationReader(),
    legacyFingerprints: createLegacyTablesFingerprinter(),
    ...(options.forceIptablesBinary ? { forceIptablesBinary: options.forceIptablesBinary } : {}),
    // With ambient, its start-up logs the node's decision (the same one: same netns, and the Istio
    // leftovers it removes never decide); once is enough.
    ...(options.ambientEnabled
      ? {}
      : { onBackendDecision: (d) => options.logger.info('iptables backend', { backend: d.backend.flavor, reason: d.reason }) }),
  });
  const ambientPolicy: { enabled: boolean; selectors: readonly EnablementSelector[]; dataplane?: MeshDataplane } = {
    enabled: options.ambientEnabled,
    selectors: options.ambientSelectors,
  };
  let ambient: Ambient | undefined;
  const ambientStarting = options.ambientEnabled ? startAmbientFor(kube, cluster, options) : undefined;
  const ready = (async () => {
    await cluster.synced;
    if (ambientStarting === undefined) return;
    ambient = await ambientStarting;
    ambientPolicy.dataplane = ambient.dataplane;
    await ambient.ready;
  })();
  const notReadyReason = (): string | undefined =>
    options.installerNotReady() ??
    (!cluster.view.isSynced()
      ? options.ambientEnabled
        ? 'pod and namespace watches not synced yet'
        : 'pod watch not synced yet'
      : options.ambientEnabled && !ambient?.isReady()
        ? 'ambient node agent still starting'
        : undefined);
  const policy = { agentNamespace: options.podNamespace, excludeNamespaces: options.excludeNamespaces };
  const handler = createNodeAgentHandler({
    view: cluster.view,
    reader: cluster.reader,
    capture,
    policy,
    ambient: ambientPolicy,
    limiter: createConcurrencyLimiter(options.concurrency ?? 4, options.maxQueued ?? 1000),
    logger: options.logger,
    netnsInode,
    notReadyReason,
    metrics: createAgentMetrics(options.registry),
    ...(options.attachmentsFile === undefined
      ? {}
      : { attachments: loadAttachments(options.attachmentsFile), onAttachmentsChange: () => saver?.changed() }),
  });
  const saver =
    options.attachmentsFile === undefined
      ? undefined
      : createAttachmentSaver(options.attachmentsFile, () => handler.attachments(), options.logger);
  const relocate = createSandboxRelocator({
    hostProcDir: options.hostProcDir,
    runner,
    attachments: () => handler.attachments(),
    move: (uid, from, to) => handler.moveAttachment(uid, from, to),
    // Every sidecar pod asks each pass: one procfs scan serves half an interval (1–30 s).
    scanTtlMs: Math.min(30_000, Math.max(1_000, (options.verifyIntervalMs ?? 60_000) / 2)),
  });
  const verifyPod = createPodVerifier({ view: cluster.view, capture, policy, ambient: ambientPolicy, netnsInode, relocate });
  const adoptSidecarPods = createSidecarAdoption({
    view: cluster.view,
    policy,
    ambient: ambientPolicy,
    attachments: () => handler.attachments(),
    locate: (uid, ips) => relocate.locate(uid, ips),
    adopt: (key, a) => handler.adopt(key, a),
    forget: (key) => handler.forget(key),
    logger: options.logger.with({ component: 'verify' }),
  });
  const verification = createVerificationLoop({
    intervalMs: options.verifyIntervalMs ?? 60_000,
    reportOnly: options.verifyReportOnly === true,
    prepare: adoptSidecarPods,
    // Ambient pods are checked by the ambient verifier (whether enrolled by ADD or by the informers).
    targets: (): VerificationTarget[] => [
      ...[...handler.attachments()].filter(([, a]) => a.mode !== 'ambient').map(([key, a]) => ({ key, pod: `${a.namespace}/${a.name}` })),
      ...(ambient?.isReady() ? ambient.verifier.targets() : []),
    ],
    verify: (t): Promise<VerifyOutcome> => {
      if (ambient !== undefined && t.key.startsWith('ambient/')) return ambient.verifier.verify(t);
      const a = handler.attachments().get(t.key);
      return a === undefined ? Promise.resolve({ status: 'skipped', reason: 'attachment deleted' }) : verifyPod(a);
    },
    logger: options.logger.with({ component: 'verify' }),
    ...createVerificationMetrics(options.registry),
  });
  ready.then(
    () => verification.start(),
    () => undefined,
  );
  const doctor = async (only?: string): Promise<Pick<DaemonState, 'backend' | 'ambient' | 'pods'>> => {
    const checks = await verification.inspectNow(only === undefined ? undefined : (t) => t.pod === only && t.scope !== 'node');
    const last = verification.results();
    const lastOf = (key: string): DoctorPod['lastVerification'] => {
      const previous = last.get(key);
      if (previous === undefined) return null;
      return {
        at: new Date(previous.at).toISOString(),
        status: previous.status,
        ...(previous.action ? { action: previous.action } : {}),
        ...(previous.error ? { error: previous.error } : {}),
      };
    };
    const checked = (outcome: VerifyOutcome) => ({
      status: outcome.status,
      ...(outcome.status === 'skipped' ? { reason: outcome.reason } : outcome.status === 'unverifiable' ? { reason: outcome.error } : {}),
      drift: outcome.status === 'drift' ? outcome.drift.map((d) => ({ kind: d.kind, detail: d.detail })) : [],
    });
    const hostRules = checks.find(({ target }) => target.scope === 'node');
    const pods = checks
      .filter(({ target }) => target.scope !== 'node')
      .map(
        ({ target, outcome }): DoctorPod => ({
          pod: target.pod,
          mode: target.key.startsWith('ambient/') ? 'ambient' : (handler.attachments().get(target.key)?.mode ?? 'none'),
          ...checked(outcome),
          lastVerification: lastOf(target.key),
        }),
      );
    return {
      backend: await capture.backend().catch((err: unknown) => `unknown (${err instanceof Error ? err.message : String(err)})`),
      ambient: {
        enabled: options.ambientEnabled,
        ztunnelConnections: ambient?.ztunnelConnections() ?? (options.ambientEnabled ? 0 : null),
        ...(hostRules === undefined
          ? {}
          : { hostRules: { ...checked(hostRules.outcome), lastVerification: lastOf(hostRules.target.key) } }),
      },
      pods,
    };
  };
  return {
    handler: (request) => handler.handle(request),
    verification,
    doctor,
    pods: cluster.pods,
    ready,
    notReadyReason,
    upgradeLookup: createDaemonSetLookup(kube, options.podNamespace, () => nodeLabels(kube, options.nodeName)),
    async stop(cleanup) {
      await verification.stop();
      await saver?.flush();
      cluster.stop();
      const a = ambient ?? (await ambientStarting?.catch(() => undefined));
      await a?.stop(cleanup);
    },
  };
}

async function nodeLabels(kube: KubeClient, nodeName: string): Promise<Record<string, string>> {
  const node = await kube.request<{ metadata?: { labels?: Record<string, string> } }>({ method: 'GET', path: nodePath(nodeName) });
  return node.metadata?.labels ?? {};
}

function startAmbientFor(kube: KubeClient, cluster: ClusterWatch, options: NodeAgentOptions): Promise<Ambient> {
  const a = options.ambient;
  if (a === undefined) return Promise.reject(new Error('ambient enabled without ambient settings'));
  return startAmbient({
    ...a,
    view: cluster.view,
    synced: cluster.synced,
    annotator: createPodAnnotator(kube),
    policy: { selectors: options.ambientSelectors, excludeNamespaces: options.excludeNamespaces, systemNamespace: a.systemNamespace },
    logger: options.logger.with({ component: 'ambient' }),
    registry: options.registry,
  });
}
