import {
  captureFailure,
  decidePod,
  missingRulesFailure,
  type AmbientSelection,
  type FoundPod,
  type LocalPolicy,
  type Pod,
  type PodDecisionInput,
  type PodFailure,
} from '@istio-cni/capture';
import { ErrorCode, errorMessage } from '@istio-cni/cni';
import { PROTOCOL, type HandoffError, type HandoffRequest, type HandoffVerdict, type Logger } from '@istio-cni/handoff';
import { PodNetnsRefusedError, uncapturedIpv6Warning } from '@istio-cni/dataplane';
import { isTransientKubeError } from '@istio-cni/kube';
import type { ClusterView, KubeReader } from '../kube/clusterView.ts';
import { LimiterFullError, type ConcurrencyLimiter } from './concurrencyLimiter.ts';
import type { AgentMetrics, MeshMode } from './agentMetrics.ts';
import type { VerifiableAttachment } from './podVerifier.ts';
import { NonRetryableError, RetryableError, redirectionState, type MeshDataplane } from '../ambient/meshDataplane.ts';

/** `::ffff:10.0.0.5` → `10.0.0.5` (upstream unmaps IPv4-mapped addresses from the event). */
function unmapIpv4(ip: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  return m ? (m[1] as string) : ip;
}

/** The capture side effects, behind an interface so the decisions are tested without root. */
export interface SidecarCapture {
  apply(pod: Pod, netns: string, podIps?: readonly string[], freshNetns?: boolean): Promise<string>;
  /** Differences between the netns and the pod's expected rules; empty = in place. */
  verify(pod: Pod, netns: string): Promise<string[]>;
}

/** Which pods are ambient, and what enrols them. */
export interface AmbientEnrolment extends AmbientSelection {
  /** Enrols ambient pods; absent while the ambient agent is still starting. */
  dataplane?: MeshDataplane;
}

export interface NodeAgentDeps {
  view: ClusterView;
  reader: KubeReader;
  capture: SidecarCapture;
  policy: LocalPolicy;
  ambient: AmbientEnrolment;
  limiter: ConcurrencyLimiter;
  logger: Logger;
  /** `undefined` when ready; otherwise why not (STATUS answers 50 with it). */
  notReadyReason(): string | undefined;
  metrics?: AgentMetrics;
  /** Monotonic nanoseconds (default `process.hrtime.bigint`); injected by tests. */
  clock?: () => bigint;
  /** Attachments an earlier run handled (restored from the run dir). */
  attachments?: Iterable<[string, VerifiableAttachment]>;
  /** Called after the tracked attachments changed (ADD, DEL, GC). */
  onAttachmentsChange?: () => void;
  /** The inode of the netns file at a CNI_NETNS path (undefined when it cannot be read), kept per attachment. */
  netnsInode?: (netns: string) => number | undefined;
}

type Outcome = HandoffVerdict | { error: HandoffError };

function error(code: number, msg: string, details?: string): Outcome {
  return { error: details ? { code, msg, details } : { code, msg } };
}

function failure(f: PodFailure): Outcome {
  return error(f.code, f.msg, f.details);
}

function verdict(v: HandoffVerdict['verdict'], reason?: string): Outcome {
  return reason ? { protocol: PROTOCOL, verdict: v, reason } : { protocol: PROTOCOL, verdict: v };
}

/** What the agent remembers per attachment (for CHECK, GC and verification): the key is `containerId/ifName`. */
type TrackedAttachment = VerifiableAttachment;

export interface NodeAgentHandler {
  handle(request: HandoffRequest): Promise<Outcome>;
  /** Attachments currently tracked (what verification checks). */
  attachments(): ReadonlyMap<string, Readonly<TrackedAttachment>>;
  /** The pod's attachments that named `from` name the pod's new sandbox netns `to` from now on. */
  moveAttachment(uid: string, from: string, to: { netns: string; inode: number }): void;
  /** Tracks a pod no ADD reached this agent for under `key` (an `ADOPTED_KEY_PREFIX` key; see sidecarAdoption.ts). */
  adopt(key: string, a: TrackedAttachment): void;
  /** Stops tracking `key`. */
  forget(key: string): void;
}

/** Keys of adopted attachments: no container ID is known for them, so CNI GC's valid list cannot name them; pod deletion drops them. */
export const ADOPTED_KEY_PREFIX = 'adopted/';

/**
 * Decides and programs each plugin hand-off (upstream `CmdAdd` order): local skips, the pod from the
 * watch-fed cache (fetched once directly when missing or stale), ambient selection, the sidecar
 * checks, then the capture rules in `CNI_NETNS`.
 */
export function createNodeAgentHandler(deps: NodeAgentDeps): NodeAgentHandler {
  const attachments = new Map<string, TrackedAttachment>(deps.attachments ?? []);
  const changed = () => deps.onAttachmentsChange?.();
  const attachmentKey = (containerId: string, ifName: string) => `${containerId}/${ifName}`;

  function remember(request: HandoffRequest, pod: Pod, mode: TrackedAttachment['mode']): void {
    const netnsInode = deps.netnsInode?.(request.netns);
    attachments.set(attachmentKey(request.containerId, request.ifName), {
      namespace: request.pod.namespace,
      name: request.pod.name,
      uid: pod.metadata.uid ?? request.pod.uid,
      netns: request.netns,
      mode,
      ...(request.ips.length > 0 ? { ips: request.ips.map((ip) => ip.address) } : {}),
      ...(netnsInode === undefined ? {} : { netnsInode }),
    });
    changed();
  }

  async function lookupPod(request: HandoffRequest): Promise<FoundPod> {
    const { namespace, name, uid } = request.pod;
    let pod = deps.view.getPod(namespace, name);
    // A cached copy of an earlier pod with the same name (StatefulSets) is as good as none.
    if (pod === undefined || (uid !== '' && pod.metadata.uid !== undefined && pod.metadata.uid !== uid)) {
      pod = await deps.reader.getPod(namespace, name);
    }
    if (pod === undefined) return { pod: undefined, namespace: undefined };
    let ns = deps.view.getNamespace(namespace);
    if (ns === undefined && deps.ambient.enabled) ns = await deps.reader.getNamespace(namespace);
    return { pod, namespace: ns };
  }

  function decisionInput(request: HandoffRequest): PodDecisionInput {
    return { podName: request.pod.name, podNamespace: request.pod.namespace, policy: deps.policy, ambient: deps.ambient };
  }

  /** `captured.mode` is set once the pod is decided to be in the mesh (what the capture latency is labelled by). */
  async function add(request: HandoffRequest, log: Logger, captured: { mode?: MeshMode }): Promise<Outcome> {
    const input = decisionInput(request);
    const local = decidePod(input);
    if (local.action === 'skip') return verdict('skipped', local.reason);
    const found = await lookupPod(request);
    const decision = decidePod({ ...input, found });
    switch (decision.action) {
      case 'skip':
        // Remembered so that verification can tell if Istio rules or annotations appear later.
        if (found.pod !== undefined) remember(request, found.pod, 'none');
        return verdict('skipped', decision.reason);
      case 'fail':
        return failure(decision);
      case 'ambient':
        captured.mode = 'ambient';
        return addAmbient(request, decision.pod, log);
      case 'sidecar':
        captured.mode = 'sidecar';
        return addSidecar(request, decision.pod, log);
    }
  }

  async function addSidecar(request: HandoffRequest, pod: Pod, log: Logger): Promise<Outcome> {
    let outcome: string;
    const podIps = request.ips.map((ip) => ip.address);
    try {
      outcome = await deps.limiter.run(() => deps.capture.apply(pod, request.netns, podIps, true));
    } catch (err) {
      const refused = captureFailure(err);
      if (refused) return failure(refused);
      // Code 8: see PodNetnsRefusedError.
      if (err instanceof PodNetnsRefusedError) return error(ErrorCode.InvalidNetNS, err.message);
      if (err instanceof LimiterFullError) return error(ErrorCode.TryAgainLater, `istio-cni agent is busy: ${err.message}`);
      throw err;
    }
    remember(request, pod, 'sidecar');
    log.info('sidecar capture programmed', { outcome });
    const bypass = uncapturedIpv6Warning(pod, podIps);
    if (bypass !== undefined) log.warn(bypass.msg, { ipv6: bypass.ipv6 });
    return verdict('redirected', outcome);
  }

  async function addAmbient(request: HandoffRequest, pod: Pod, log: Logger): Promise<Outcome> {
    const dataplane = deps.ambient.dataplane;
    if (dataplane === undefined) return error(ErrorCode.TryAgainLater, 'ambient node agent is still starting');
    // The API has no pod IP yet at ADD time: the primary plugin's result has it (as upstream `cni-watcher.go`).
    const ips = request.ips.map((ip) => unmapIpv4(ip.address.split('/')[0] ?? ''));
    try {
      await deps.limiter.run(() => dataplane.addPodToMesh(pod, ips, request.netns));
    } catch (err) {
      if (err instanceof PodNetnsRefusedError) return error(ErrorCode.InvalidNetNS, err.message);
      // Fail closed: the pod must not start before ztunnel has it (as upstream `cni-watcher.go`).
      if (err instanceof RetryableError || err instanceof LimiterFullError) return error(ErrorCode.TryAgainLater, err.message);
      if (err instanceof NonRetryableError) return error(ErrorCode.Internal, err.message);
      throw err;
    }
    remember(request, pod, 'ambient');
    log.info('pod enrolled in ambient mode');
    return verdict('enrolled');
  }

  async function check(request: HandoffRequest): Promise<Outcome> {
    const input = decisionInput(request);
    if (decidePod(input).action === 'skip') return verdict('ok');
    const found = await lookupPod(request);
    // Unlike ADD, a CHECK of a pod the API does not know is an internal error.
    if (found.pod === undefined) return error(ErrorCode.Internal, `pod ${request.pod.namespace}/${request.pod.name} not found`);
    const decision = decidePod({ ...input, found });
    switch (decision.action) {
      case 'skip':
        return verdict('ok', decision.reason);
      case 'fail':
        return failure(decision);
      case 'ambient':
        return redirectionState(decision.pod) === 'enabled'
          ? verdict('ok')
          : error(ErrorCode.TryAgainLater, 'ambient pod is not enrolled (yet)');
      case 'sidecar':
        return checkSidecar(request, decision.pod);
    }
  }

  async function checkSidecar(request: HandoffRequest, pod: Pod): Promise<Outcome> {
    let missing: string[];
    try {
      missing = await deps.limiter.run(() => deps.capture.verify(pod, request.netns));
    } catch (err) {
      const refused = captureFailure(err);
      if (refused) return failure(refused);
      // Code 8, as ADD: see PodNetnsRefusedError.
      if (err instanceof PodNetnsRefusedError) return error(ErrorCode.InvalidNetNS, err.message);
      throw err;
    }
    const notInPlace = missingRulesFailure(missing);
    return notInPlace ? failure(notInPlace) : verdict('ok');
  }

  function gc(request: HandoffRequest): Outcome {
    const valid = new Set((request.validAttachments ?? []).map((a) => attachmentKey(a.containerId, a.ifName)));
    let dropped = 0;
    for (const key of attachments.keys()) {
      if (!valid.has(key) && !key.startsWith(ADOPTED_KEY_PREFIX)) {
        attachments.delete(key);
        dropped++;
      }
    }
    if (dropped > 0) changed();
    return verdict('ok', `dropped ${dropped} stale attachment(s)`);
  }

  const now = deps.clock ?? (() => process.hrtime.bigint());

  return {
    attachments: () => attachments,
    moveAttachment(uid, from, to) {
      let moved = 0;
      for (const [key, a] of attachments) {
        if (a.uid !== uid || a.netns !== from) continue;
        attachments.set(key, { ...a, netns: to.netns, netnsInode: to.inode });
        moved++;
      }
      if (moved > 0) changed();
    },
    adopt(key, a) {
      attachments.set(key, a);
      changed();
    },
    forget(key) {
      if (attachments.delete(key)) changed();
    },
    async handle(request) {
      const log = deps.logger.with({ pod: `${request.pod.namespace}/${request.pod.name}`, containerID: request.containerId });
      const started = now();
      const captured: { mode?: MeshMode } = {};
      let outcome: Outcome;
      try {
        switch (request.command) {
          case 'ADD':
            outcome = await add(request, log, captured);
            break;
          case 'DEL':
            if (attachments.delete(attachmentKey(request.containerId, request.ifName))) changed();
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
            outcome = reason === undefined ? verdict('ok') : error(ErrorCode.PluginNotAvailable, reason);
            break;
          }
        }
      } catch (err) {
        const msg = errorMessage(err);
        if (isTransientKubeError(err)) {
          // The client already retried within its deadline; the runtime retries the ADD later.
          log.warn(`${request.command}: Kubernetes API unavailable`, { error: msg });
          outcome = error(ErrorCode.TryAgainLater, `Kubernetes API call failed, try again: ${msg}`);
        } else {
          log.error(`${request.command} failed`, { error: msg });
          outcome = error(ErrorCode.Internal, msg);
        }
      }
      if ('error' in outcome) log.warn(`${request.command} refused`, { code: outcome.error.code, error: outcome.error.msg });
      else if (outcome.verdict === 'skipped') log.debug('pod skipped', { reason: outcome.reason });
      const code = 'error' in outcome ? outcome.error.code : 0;
      const seconds = Number(now() - started) / 1e9;
      deps.metrics?.observe(request.command, code, seconds);
      if (captured.mode !== undefined) deps.metrics?.observePodCapture(captured.mode, code, seconds);
      return outcome;
    },
  };
}
