import {
  AnnotationError,
  ambientEnabledFor,
  localSkipReason,
  sidecarDecision,
  type EnablementSelector,
  type LocalPolicy,
  type Namespace,
  type Pod,
} from '@istio-cni/capture';
import { ErrorCode } from '@istio-cni/cni';
import { PodNetnsRefusedError } from '@istio-cni/dataplane';
import type { HandoffError, HandoffRequest, HandoffVerdict, Logger } from '@istio-cni/handoff';
import type { ClusterView, KubeReader } from '../kube/clusterView.ts';
import { LimiterFullError, type ConcurrencyLimiter } from './concurrencyLimiter.ts';
import type { AgentMetrics } from './agentMetrics.ts';
import { NonRetryableError, RetryableError, redirectionState, type MeshDataplane } from '../ambient/meshDataplane.ts';

/** `::ffff:10.0.0.5` → `10.0.0.5` (upstream unmaps IPv4-mapped addresses from the event). */
function unmapIpv4(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? (m[1] as string) : ip;
}

/** The capture side effects, behind an interface so the decisions are tested without root. */
export interface SidecarCapture {
  apply(pod: Pod, netns: string, podIps?: readonly string[]): Promise<string>;
  /** Differences between the netns and the pod's expected rules; empty = in place. */
  verify(pod: Pod, netns: string): Promise<string[]>;
}

export interface AmbientPolicy {
  enabled: boolean;
  selectors: readonly EnablementSelector[];
  /** Enrols ambient pods; absent while the ambient agent is still starting. */
  dataplane?: MeshDataplane;
}

export interface NodeAgentDeps {
  view: ClusterView;
  reader: KubeReader;
  capture: SidecarCapture;
  policy: LocalPolicy;
  ambient: AmbientPolicy;
  limiter: ConcurrencyLimiter;
  logger: Logger;
  /** `undefined` when ready; otherwise why not (STATUS answers 50 with it). */
  notReadyReason(): string | undefined;
  metrics?: AgentMetrics;
}

type Outcome = HandoffVerdict | { error: HandoffError };

// invalidNetns: why code 8 for a refused netns is explained at PodNetnsRefusedError.
const CODE = { invalidConfig: 7, invalidNetns: ErrorCode.InvalidNetNS, tryAgain: 11, notAvailable: 50, internal: 999 } as const;

function error(code: number, msg: string, details?: string): Outcome {
  return { error: details ? { code, msg, details } : { code, msg } };
}

function verdict(v: HandoffVerdict['verdict'], reason?: string): Outcome {
  return reason ? { protocol: 1, verdict: v, reason } : { protocol: 1, verdict: v };
}

/** What the agent remembers per attachment (for CHECK and GC): the key is `containerId/ifName`. */
interface Attachment {
  namespace: string;
  name: string;
  uid: string;
  netns: string;
  mode: 'sidecar' | 'ambient';
}

export interface NodeAgentHandler {
  handle(request: HandoffRequest): Promise<Outcome>;
  /** Attachments currently tracked (exported for testing purposes only). */
  attachments(): ReadonlyMap<string, Readonly<Attachment>>;
}

/**
 * Decides and programs each plugin hand-off (SPEC 2.4 order): local skips, the pod from the
 * watch-fed cache (fetched once directly when missing or stale), ambient selection, the sidecar
 * checks, then the capture rules in `CNI_NETNS`.
 */
export function createNodeAgentHandler(deps: NodeAgentDeps): NodeAgentHandler {
  const attachments = new Map<string, Attachment>();
  const attachmentKey = (containerId: string, ifName: string) => `${containerId}/${ifName}`;

  function remember(request: HandoffRequest, pod: Pod, mode: Attachment['mode']): void {
    attachments.set(attachmentKey(request.containerId, request.ifName), {
      namespace: request.pod.namespace,
      name: request.pod.name,
      uid: pod.metadata.uid ?? request.pod.uid,
      netns: request.netns,
      mode,
    });
  }

  async function lookupPod(request: HandoffRequest): Promise<{ pod: Pod; namespace: Namespace | undefined } | undefined> {
    const { namespace, name, uid } = request.pod;
    let pod = deps.view.getPod(namespace, name);
    // A cached copy of an earlier pod with the same name (StatefulSets) is as good as none.
    if (pod === undefined || (uid !== '' && pod.metadata.uid !== undefined && pod.metadata.uid !== uid)) {
      pod = await deps.reader.getPod(namespace, name);
    }
    if (pod === undefined) return undefined;
    let ns = deps.view.getNamespace(namespace);
    if (ns === undefined && deps.ambient.enabled) ns = await deps.reader.getNamespace(namespace);
    return { pod, namespace: ns };
  }

  async function add(request: HandoffRequest, log: Logger): Promise<Outcome> {
    const skip = localSkipReason(request.pod.name, request.pod.namespace, deps.policy);
    if (skip) return verdict('skipped', skip);
    const found = await lookupPod(request);
    if (found === undefined) {
      return error(CODE.tryAgain, `pod ${request.pod.namespace}/${request.pod.name} not found in the Kubernetes API`);
    }
    const { pod } = found;
    if (deps.ambient.enabled && ambientEnabledFor(pod, found.namespace, deps.ambient.selectors)) {
      return addAmbient(request, pod, log);
    }
    const decision = sidecarDecision(pod);
    if (!decision.redirect) return verdict('skipped', decision.reason);
    let outcome: string;
    try {
      const podIps = request.ips.map((ip) => ip.address);
      outcome = await deps.limiter.run(() => deps.capture.apply(pod, request.netns, podIps));
    } catch (err) {
      if (err instanceof AnnotationError) return error(CODE.invalidConfig, err.message);
      if (err instanceof PodNetnsRefusedError) return error(CODE.invalidNetns, err.message);
      if (err instanceof LimiterFullError) return error(CODE.tryAgain, `istio-cni agent is busy: ${err.message}`);
      throw err;
    }
    remember(request, pod, 'sidecar');
    log.info('sidecar capture programmed', { outcome });
    return verdict('redirected', outcome);
  }

  async function addAmbient(request: HandoffRequest, pod: Pod, log: Logger): Promise<Outcome> {
    const dataplane = deps.ambient.dataplane;
    if (dataplane === undefined) return error(CODE.tryAgain, 'ambient node agent is still starting');
    // The API has no pod IP yet at ADD time: the primary plugin's result has it (SPEC 4.2).
    const ips = request.ips.map((ip) => unmapIpv4(ip.address.split('/')[0] ?? ''));
    try {
      await deps.limiter.run(() => dataplane.addPodToMesh(pod, ips, request.netns));
    } catch (err) {
      // Fail closed: the pod must not start before ztunnel has it (SPEC 4.2).
      if (err instanceof PodNetnsRefusedError) return error(CODE.invalidNetns, err.message);
      if (err instanceof RetryableError || err instanceof LimiterFullError) return error(CODE.tryAgain, err.message);
      if (err instanceof NonRetryableError) return error(CODE.internal, err.message);
      throw err;
    }
    remember(request, pod, 'ambient');
    log.info('pod enrolled in ambient mode');
    return verdict('enrolled');
  }

  async function check(request: HandoffRequest): Promise<Outcome> {
    if (localSkipReason(request.pod.name, request.pod.namespace, deps.policy)) return verdict('ok');
    const found = await lookupPod(request);
    if (found === undefined) return error(CODE.internal, `pod ${request.pod.namespace}/${request.pod.name} not found`);
    if (deps.ambient.enabled && ambientEnabledFor(found.pod, found.namespace, deps.ambient.selectors)) {
      return redirectionState(found.pod) === 'enabled'
        ? verdict('ok')
        : error(CODE.tryAgain, 'ambient pod is not enrolled (yet)');
    }
    const decision = sidecarDecision(found.pod);
    if (!decision.redirect) return verdict('ok', decision.reason);
    let missing: string[];
    try {
      missing = await deps.limiter.run(() => deps.capture.verify(found.pod, request.netns));
    } catch (err) {
      if (err instanceof AnnotationError) return error(CODE.invalidConfig, err.message);
      throw err;
    }
    if (missing.length > 0) {
      return error(CODE.internal, 'sidecar capture rules are not in place', missing.slice(0, 20).join('; '));
    }
    return verdict('ok');
  }

  function gc(request: HandoffRequest): Outcome {
    const valid = new Set((request.validAttachments ?? []).map((a) => attachmentKey(a.containerId, a.ifName)));
    let dropped = 0;
    for (const key of attachments.keys()) {
      if (!valid.has(key)) {
        attachments.delete(key);
        dropped++;
      }
    }
    return verdict('ok', `dropped ${dropped} stale attachment(s)`);
  }

  return {
    attachments: () => attachments,
    async handle(request) {
      const log = deps.logger.with({ pod: `${request.pod.namespace}/${request.pod.name}`, containerID: request.containerId });
      const started = process.hrtime.bigint();
      let outcome: Outcome;
      try {
        switch (request.command) {
          case 'ADD':
            outcome = await add(request, log);
            break;
          case 'DEL':
            attachments.delete(attachmentKey(request.containerId, request.ifName));
            outcome = verdict('ok');
            break;
          case 'CHECK':
            outcome = await check(request);
            break;
          case 'GC':
            outcome = gc(request);
            break;
          case 'STATUS': {
            const reason = deps.notReadyReason();
            outcome = reason === undefined ? verdict('ok') : error(CODE.notAvailable, reason);
            break;
          }
        }
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        log.error(`${request.command} failed`, { error: msg });
        outcome = error(CODE.internal, msg);
      }
      if ('error' in outcome) log.warn(`${request.command} refused`, { code: outcome.error.code, error: outcome.error.msg });
      else if (outcome.verdict === 'skipped') log.debug('pod skipped', { reason: outcome.reason });
      deps.metrics?.observe(request.command, 'error' in outcome ? outcome.error.code : 0, started);
      return outcome;
    },
  };
}
