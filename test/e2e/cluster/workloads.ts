// What the cluster scenarios run in their pods (busybox shell scripts whose log says what a
// connection reached) and how they read the API's view of them.
import type { KubeClient } from '../support/kubeClient.ts';
import type { ControlPlane } from './controlPlane.ts';
import { describeNamespace, WORKLOAD_IMAGE } from './localCluster.ts';

/** An address nothing answers on: only a capture rule can make a connection to it succeed. */
export const NOWHERE = '192.0.2.123';

type ContainerState = { terminated?: { exitCode?: number } };

export interface Pod {
  metadata: { name: string; uid: string; annotations?: Record<string, string>; deletionTimestamp?: string };
  spec: { nodeName?: string; hostUsers?: boolean };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type: string; status: string; lastTransitionTime?: string }[];
    containerStatuses?: { name: string; restartCount: number; containerID?: string }[];
    initContainerStatuses?: { name: string; state?: ContainerState; lastState?: ContainerState }[];
  };
}

export const container = (name: string, script: string, user?: number) => ({
  name,
  image: WORKLOAD_IMAGE,
  imagePullPolicy: 'Never',
  command: ['sh', '-c', script],
  ...(user === undefined ? {} : { securityContext: { runAsUser: user, runAsGroup: user } }),
});

/**
 * An HTTP server on 8080 and kubelet's readiness probe of it every second, one failure enough to
 * make the pod not Ready: in an ambient pod it passes only through the node's probe SNAT.
 */
export const probedHttpServer = () => ({
  ...container('app', 'mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www'),
  readinessProbe: { httpGet: { path: '/index.html', port: 8080 }, periodSeconds: 1, failureThreshold: 1 },
});

/**
 * What istio-validation (the init container istiod injects in CNI mode) checks: a connection to
 * anywhere reaches the pod's own 15001; else it exits 126 and kubelet retries it.
 */
export const validationContainer = () =>
  container(
    'istio-validation',
    `nc -ll -p 15001 -e echo validated & sleep 0.5; out=$(nc -w 2 ${NOWHERE} 80 </dev/null); [ "$out" = validated ] || exit 126`,
  );

/** Answers every connection on port with its name (busybox nc: `-ll` keeps listening). */
export const serve = (port: number, answer: string) => `nc -ll -p ${port} -e echo ${answer}`;
/**
 * Runs `script` once the pod's own listener on port answers `answer` (over loopback, which capture
 * leaves alone): a probe must not race the proxy container's start.
 */
export const whenListening = (port: number, answer: string, script: string) =>
  `until [ "$(nc -w 1 127.0.0.1 ${port} </dev/null)" = ${answer} ]; do sleep 0.2; done; ${script}`;
/** Connects until something answers, prints `answer:<what it said>`, then idles. */
export const probe = (host: string, port: number) =>
  `until out=$(nc -w 2 ${host} ${port} </dev/null) && [ -n "$out" ]; do sleep 1; done; echo "answer:$out"; sleep 86400`;
/** Connects a few times, prints `answer:<what it said>` or `answer:none`, then idles. */
export const probeOnce = (host: string, port: number) =>
  `out=; for i in 1 2 3; do out=$(nc -w 2 ${host} ${port} </dev/null) && [ -n "$out" ] && break; sleep 1; done; echo "answer:\${out:-none}"; sleep 86400`;
/** Connects every second for ever, printing `tick:<n>:<what it said or none>`. */
export const probeLoop = (host: string, port: number) =>
  `i=0; while true; do i=$((i+1)); out=$(nc -w 2 ${host} ${port} </dev/null); echo "tick:$i:\${out:-none}"; sleep 1; done`;

export const isReady = (pod: Pod) => pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

/** Creates a namespace, then waits for its default service account (the controller-manager's), which pods need. */
export async function createNamespace(api: KubeClient, name: string, labels: Record<string, string> = {}): Promise<void> {
  await api.must('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
  await waitFor(
    `the default service account in ${name}`,
    async () => ((await api.request('GET', `/api/v1/namespaces/${name}/serviceaccounts/default`)).status === 200 ? true : undefined),
    60_000,
  );
}

/** Until `check` returns a value or timeoutMs passes; the error names `what` and adds `detail`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs: number,
  detail?: () => Promise<string>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s${detail ? `\n${await detail()}` : ''}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Until the pod is Ready (its namespace described on timeout); the pod as the API then reports it. */
export function waitPodReady(controlPlane: ControlPlane, name: string, namespace: string, timeoutMs = 120_000): Promise<Pod> {
  return waitFor(
    `pod ${namespace}/${name} Ready`,
    async () => {
      const p = await controlPlane.api.must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
      return isReady(p) ? p : undefined;
    },
    timeoutMs,
    () => describeNamespace(controlPlane, namespace),
  );
}

/** The agent's JSON log lines that name `namespace/name` (its `pod` field, or in a message). */
export function linesNamingPod(log: string, namespace: string, name: string): string[] {
  const escaped = `${namespace}/${name}`.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const named = new RegExp(`(^|[^\\w-])${escaped}(?![\\w-])`);
  return log.split('\n').filter((line) => named.test(line));
}

export interface SandboxFailureEvent {
  involvedObject?: { name?: string };
  firstTimestamp?: string | null;
  lastTimestamp?: string | null;
  eventTime?: string | null;
  count?: number;
}

export interface UpgradeFailures {
  /** Failed sandbox creations (kubelet's FailedCreatePodSandBox events, their repeat counts included). */
  sandboxFailures: number;
  /** Pods whose sandbox came up without capture (their istio-validation exited 126). */
  uncaptured: string[];
  /** Pods with a failed sandbox creation. */
  sandboxFailed: string[];
  /**
   * The longest stretch of failed creations (a failed sandbox, or a sandbox without capture) with no
   * successful one in between, in ms: from the last success before it (or `since`) to the first
   * success after it (or `until`), so an upper bound at the pods' rate. 0 when nothing failed.
   */
  longestWindowMs: number;
}

const VALIDATION_FAILED = 126;

/** True when the pod's istio-validation exited 126 (now or in its last run): a sandbox came up without capture. */
export const validationFailed = (pod: Pod): boolean =>
  pod.status?.initContainerStatuses?.some(
    (c) =>
      c.name === 'istio-validation' &&
      (c.state?.terminated?.exitCode === VALIDATION_FAILED || c.lastState?.terminated?.exitCode === VALIDATION_FAILED),
  ) === true;

/** The repair controller's events in `namespace` (any reason or reporter naming repair) last seen at or after `since`. */
export async function repairEvents(api: KubeClient, namespace: string, since = 0): Promise<{ count: number; reasons: string[] }> {
  const events = (
    await api.must<{
      items: {
        reason?: string;
        count?: number;
        source?: { component?: string };
        reportingComponent?: string;
        lastTimestamp?: string | null;
        eventTime?: string | null;
      }[];
    }>('GET', `/api/v1/namespaces/${namespace}/events`)
  ).items.filter(
    (e) =>
      /repair/i.test(`${e.reason} ${e.source?.component ?? ''} ${e.reportingComponent ?? ''}`) &&
      (since === 0 || Date.parse(e.lastTimestamp ?? e.eventTime ?? '') >= Math.floor(since / 1000) * 1000),
  );
  return { count: events.reduce((n, e) => n + (e.count ?? 1), 0), reasons: [...new Set(events.map((e) => String(e.reason)))] };
}

/**
 * What became of pods created while the agents were replaced, from the API: kubelet's sandbox
 * failure events and each pod's first sandbox (PodReadyToStartContainers) with or without capture.
 * The API's timestamps have one-second resolution.
 */
export function summarizeUpgradeFailures(
  pods: readonly Pod[],
  events: readonly SandboxFailureEvent[],
  since: number,
  until: number,
): UpgradeFailures {
  const names = new Set(pods.map((p) => p.metadata.name));
  const timeline: { at: number; failed: boolean }[] = [];
  const sandboxFailed = new Set<string>();
  let sandboxFailures = 0;
  for (const e of events) {
    const name = e.involvedObject?.name;
    if (name === undefined || !names.has(name)) continue;
    sandboxFailures += e.count ?? 1;
    sandboxFailed.add(name);
    for (const stamp of [e.firstTimestamp ?? e.eventTime, e.lastTimestamp]) {
      const at = Date.parse(stamp ?? '');
      if (!Number.isNaN(at)) timeline.push({ at, failed: true });
    }
  }
  const uncaptured: string[] = [];
  for (const pod of pods) {
    const sandboxReady = pod.status?.conditions?.find((c) => c.type === 'PodReadyToStartContainers' && c.status === 'True');
    const at = Date.parse(sandboxReady?.lastTransitionTime ?? '');
    if (Number.isNaN(at)) throw new Error(`${pod.metadata.name} has no PodReadyToStartContainers time`);
    const failed = validationFailed(pod);
    if (failed) uncaptured.push(pod.metadata.name);
    timeline.push({ at, failed });
  }
  // Successes sort before failures at the same second: the window is not stretched by ties.
  timeline.sort((a, b) => a.at - b.at || Number(a.failed) - Number(b.failed));
  let longestWindowMs = 0;
  let lastSuccess = since;
  let failing = false;
  for (const point of [...timeline, { at: until, failed: false }]) {
    if (point.failed) failing = true;
    else {
      if (failing) longestWindowMs = Math.max(longestWindowMs, point.at - lastSuccess);
      failing = false;
      lastSuccess = point.at;
    }
  }
  return { sandboxFailures, uncaptured: uncaptured.sort(), sandboxFailed: [...sandboxFailed].sort(), longestWindowMs };
}

export interface GapWatch {
  /** Stops watching; the stretches during which `present` was false, in ms, in order. */
  stop(): { from: number; to: number }[];
  /** How many times `present` was sampled, and how many of those found it false. */
  samples(): { taken: number; missing: number };
}

/** Samples `present` every `everyMs` and records when it stopped and started holding again. */
export function watchGaps(present: () => boolean, everyMs: number): GapWatch {
  const gaps: { from: number; to: number }[] = [];
  let missingSince: number | undefined;
  let taken = 0;
  let missing = 0;
  const sample = () => {
    const now = Date.now();
    taken++;
    if (present()) {
      if (missingSince !== undefined) gaps.push({ from: missingSince, to: now });
      missingSince = undefined;
    } else {
      missing++;
      missingSince ??= now;
    }
  };
  sample();
  const timer = setInterval(sample, everyMs);
  return {
    stop() {
      clearInterval(timer);
      sample();
      if (missingSince !== undefined) gaps.push({ from: missingSince, to: Date.now() });
      return gaps;
    },
    samples: () => ({ taken, missing }),
  };
}
