import { existsSync, mkdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import { ctrArgv } from '../support/containerd.ts';
import { REPO_ROOT, rigBinary, type RigBinary } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';
import { startControlPlane, type ControlPlane } from './controlPlane.ts';
import { CLUSTER_DIR, clusterAddressing, HOST_CLAIM_FILE, type IpFamily, KUBECONFIG_FILE, MAX_NODES, nodeLayout } from './layout.ts';
import { claimHost } from '../support/hostClaim.ts';
import { createNodeBridge, createNodeNetns, removeUnclaimedNodeNetwork, routePodCidrs } from './network.ts';
import { startNode, waitNodeReady, type RunningNode } from './node.ts';
import { writeBusyboxImage } from './ociImage.ts';
import { emptyState, loadState, saveState } from './state.ts';
import { clusterClaimHolder } from './teardown.ts';

/** Debian's busybox-static, imported into every node: the workload image of examples and e2e pods. */
export const WORKLOAD_IMAGE = 'localhost/istio-cni-cluster/busybox:v1';
export const DAEMONSET = 'istio-cni-node';

export interface LocalClusterOptions {
  nodes: number;
  /** The node image reference the chart runs (it must be the name the archive imports as). */
  image: string;
  /** An OCI image archive holding `image`. */
  imageTar: string;
  /** Extra chart values, `key=value`. */
  chartSet?: readonly string[];
  /** More OCI image archives imported into every node (e.g. upstream's agent image). */
  extraImageTars?: readonly string[];
  /** false: no `helm install`, the caller installs a chart of its choice (default true). */
  install?: boolean;
  /** The cluster's address families (default ipv4): node, pod and Service addresses of each, primary first. */
  ipFamily?: IpFamily;
  /** The nodes' primary conflist `cniVersion` (default: E2E_PRIMARY_CNI_VERSION, see layout.ts). */
  primaryCniVersion?: string;
  log?: (line: string) => void;
}

export interface LocalCluster {
  controlPlane: ControlPlane;
  nodes: RunningNode[];
  kubeconfig: string;
}

/** The cluster's node `index` (0-based); fails naming it when the cluster has fewer. */
export function clusterNode(cluster: LocalCluster, index: number): RunningNode {
  const node = cluster.nodes[index];
  if (node === undefined) throw new Error(`node ${index + 1} of ${cluster.nodes.length}`);
  return node;
}

/**
 * Brings the cluster up and installs the chart; throws (leaving `.cluster/state.json` for `make
 * down`) when any step fails.
 */
export async function bringUp(options: LocalClusterOptions): Promise<LocalCluster> {
  const log = options.log ?? (() => {});
  const { image, imageTar } = options;
  if (!Number.isInteger(options.nodes) || options.nodes < 1 || options.nodes > MAX_NODES) {
    throw new Error(`NODES must be 1..${MAX_NODES}, not ${options.nodes}`);
  }
  if (loadState() !== undefined)
    throw new Error(`a cluster is up (${relative(REPO_ROOT, CLUSTER_DIR)}/state.json): run \`make down\` first`);
  if (process.getuid?.() !== 0) throw new Error('the cluster needs root (network namespaces, mounts, cgroups, containerd)');
  if (!existsSync(imageTar))
    throw new Error(`node image archive ${relative(REPO_ROOT, imageTar)} is missing: run \`make image\` (or set IMAGE_ARCHIVE)`);
  for (const tar of options.extraImageTars ?? [])
    if (!existsSync(tar)) throw new Error(`image archive ${relative(REPO_ROOT, tar)} is missing`);
  const needed: RigBinary[] = [
    'containerd',
    'containerd-shim-runc-v2',
    'ctr',
    'runc',
    'etcd',
    'kube-apiserver',
    'kube-controller-manager',
    'kube-scheduler',
    'kubelet',
    'crictl',
    'helm',
    'pause',
    'pause-image.tar',
  ];
  for (const b of needed) rigBinary(b);

  await claimHost(HOST_CLAIM_FILE, CLUSTER_DIR, clusterClaimHolder, log);
  const state = emptyState();
  saveState(state);
  await removeUnclaimedNodeNetwork(log);
  const addressing = clusterAddressing(options.ipFamily);
  const nodes = Array.from({ length: options.nodes }, (_, i) => nodeLayout(i + 1, addressing));
  log(`node network, ${addressing.ipFamily} (${nodes.map((n) => `${n.name} ${n.ips.join(' ')} pods ${n.podCidrs.join(' ')}`).join(', ')})`);
  await createNodeBridge(state, addressing);
  for (const node of nodes) await createNodeNetns(state, node, addressing);
  await routePodCidrs(nodes, addressing);

  log(
    `control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), Services ${addressing.plans.map((p) => p.serviceCidr).join(' ')}`,
  );
  const controlPlane = await startControlPlane(state, nodes, addressing);

  const imagesDir = join(CLUSTER_DIR, 'images');
  mkdirSync(imagesDir, { recursive: true });
  const workloadTar = join(imagesDir, 'busybox.oci.tar');
  await writeBusyboxImage(WORKLOAD_IMAGE, workloadTar);

  const running: RunningNode[] = [];
  for (const node of nodes) {
    log(`${node.name}: containerd (importing ${relative(REPO_ROOT, imageTar)}, the pause and workload images), kubelet`);
    running.push(
      await startNode(state, node, controlPlane, [imageTar, ...(options.extraImageTars ?? []), workloadTar], options.primaryCniVersion),
    );
  }
  for (const node of running) {
    await requireImage(node, image, imageTar);
    await waitNodeReady(controlPlane, node);
  }
  log(`${options.nodes} node(s) Ready`);
  if (options.install === false) return { controlPlane, nodes: running, kubeconfig: KUBECONFIG_FILE };

  log(`helm install ${RELEASE_NAME} (${relative(REPO_ROOT, CHART_DIR)}) with ${image}, pullPolicy Never`);
  await helmInstall(image, options.chartSet ?? []);
  await waitDaemonSetReady(controlPlane, options.nodes);
  return { controlPlane, nodes: running, kubeconfig: KUBECONFIG_FILE };
}

/** `ctr import` names the image from the archive; the chart must find it under exactly `ref`. */
export async function requireImage(node: RunningNode, ref: string, imageTar: string): Promise<void> {
  const listed = await runCommand([...ctrArgv(node.containerdSocket, 'k8s.io'), 'images', 'ls', '-q']);
  const refs = listed.stdout.split('\n').filter(Boolean);
  // containerd spells a bare Docker Hub reference in full.
  if (!refs.includes(ref) && !refs.includes(`docker.io/${ref}`)) {
    const names = refs.filter((r) => !r.startsWith('sha256:')).join(', ');
    throw new Error(
      `${node.layout.name}: ${relative(REPO_ROOT, imageTar)} did not import as ${ref} (images: ${names}); set IMAGE to its name`,
    );
  }
}

/** The rig's helm against the cluster, its caches under `.cluster/helm`. */
export async function helm(args: readonly string[]): Promise<void> {
  const helmHome = join(CLUSTER_DIR, 'helm');
  const env = {
    ...process.env,
    KUBECONFIG: KUBECONFIG_FILE,
    HELM_CACHE_HOME: join(helmHome, 'cache'),
    HELM_CONFIG_HOME: join(helmHome, 'config'),
    HELM_DATA_HOME: join(helmHome, 'data'),
  };
  await runCommand([rigBinary('helm'), ...args], { env, timeoutMs: 120_000 });
}

/** `helm install` of the chart from manifests/ running `ref`, never pulled. */
export async function helmInstall(ref: string, extraSet: readonly string[] = []): Promise<void> {
  const sets = [`image=${ref}`, 'pullPolicy=Never', ...extraSet].flatMap((s) => ['--set', s]);
  await helm(['install', RELEASE_NAME, CHART_DIR, '--namespace', RELEASE_NAMESPACE, '--create-namespace', ...sets]);
}

/** What `kubectl rollout restart` does: a new template annotation, so every agent pod is replaced. */
export async function restartDaemonSet(controlPlane: ControlPlane): Promise<void> {
  await controlPlane.api.must(
    'PATCH',
    `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/${DAEMONSET}`,
    { spec: { template: { metadata: { annotations: { 'kubectl.kubernetes.io/restartedAt': new Date().toISOString() } } } } },
    { contentType: 'application/strategic-merge-patch+json' },
  );
}

interface DaemonSetStatus {
  metadata: { generation?: number };
  status?: { observedGeneration?: number; desiredNumberScheduled?: number; numberReady?: number; updatedNumberScheduled?: number };
}

/**
 * Until the DaemonSet's current generation is Ready on `expected` nodes; fails at once when one of
 * its containers crash-loops, naming it with the failed run's last log lines, else after timeoutMs.
 */
export async function waitDaemonSetReady(controlPlane: ControlPlane, expected: number, timeoutMs = 180_000): Promise<void> {
  const path = `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/${DAEMONSET}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ds = await controlPlane.api.must<DaemonSetStatus>('GET', path);
    const s = ds.status ?? {};
    const current = (s.observedGeneration ?? 0) >= (ds.metadata.generation ?? 1);
    if (current && s.desiredNumberScheduled === expected && s.numberReady === expected && s.updatedNumberScheduled === expected) return;
    const crash = await findCrashLoop(controlPlane);
    if (crash !== undefined) {
      throw new Error(
        `DaemonSet ${RELEASE_NAMESPACE}/${DAEMONSET}: pod ${crash.pod} on ${crash.node}, container ${crash.container}, ` +
          `${crash.reason} after ${crash.restarts} restart(s); its last log lines:\n${crash.lastLog}\n` +
          (await describeNamespace(controlPlane, RELEASE_NAMESPACE)),
      );
    }
    if (Date.now() > deadline) {
      throw new Error(
        `DaemonSet ${RELEASE_NAMESPACE}/${DAEMONSET} not Ready on ${expected} node(s) within ${timeoutMs / 1000} s ` +
          `(${s.numberReady ?? 0} Ready, ${s.updatedNumberScheduled ?? 0} updated)\n${await describeNamespace(controlPlane, RELEASE_NAMESPACE)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

interface CrashLoop {
  pod: string;
  node: string;
  container: string;
  reason: string;
  restarts: number;
  lastLog: string;
}

const CRASH_LOG_LINES = 20;

/**
 * A container of a DaemonSet pod (not being deleted) that restarted and is in CrashLoopBackOff or
 * terminated with an error, with the failed run's last log lines (`pods/log`, `previous=true` while
 * it waits to restart).
 */
async function findCrashLoop(controlPlane: ControlPlane): Promise<CrashLoop | undefined> {
  const pods = await controlPlane.api.must<{ items: PodSummary[] }>(
    'GET',
    `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=${encodeURIComponent(`k8s-app=${DAEMONSET}`)}`,
  );
  for (const pod of pods.items) {
    if (pod.metadata.deletionTimestamp !== undefined) continue;
    for (const c of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
      const waiting = c.state?.waiting;
      const terminated = c.state?.terminated;
      const crashing = waiting?.reason === 'CrashLoopBackOff' || (terminated !== undefined && terminated.exitCode !== 0);
      if (c.restartCount === 0 || !crashing) continue;
      const last = c.lastState?.terminated ?? terminated;
      const exit = last === undefined ? '' : ` (last exit ${last.exitCode ?? '?'}${last.reason === undefined ? '' : `, ${last.reason}`})`;
      // Terminated now: the current run is the one that failed; waiting to restart: the previous one.
      const log = await crashedRunLog(controlPlane, pod.metadata.name, c.name, terminated === undefined);
      return {
        pod: pod.metadata.name,
        node: pod.spec.nodeName ?? '(unscheduled)',
        container: c.name,
        reason: `${waiting?.reason ?? terminated?.reason ?? 'terminated'}${exit}`,
        restarts: c.restartCount,
        lastLog: log,
      };
    }
  }
  return undefined;
}

/** The last log lines of the run that failed; the other run's when kubelet no longer has that one. */
async function crashedRunLog(controlPlane: ControlPlane, pod: string, container: string, previous: boolean): Promise<string> {
  let answer = '';
  for (const p of [previous, !previous]) {
    const log = await controlPlane.api.request(
      'GET',
      `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${pod}/log?container=${container}&previous=${p}&tailLines=${CRASH_LOG_LINES}`,
    );
    answer = log.status === 200 ? log.text.trimEnd() : `(pods/log ${log.status}: ${log.text.slice(0, 300)})`;
    if (log.status === 200 && !log.text.startsWith('unable to retrieve container logs')) return `${p ? '(previous run) ' : ''}${answer}`;
  }
  return answer;
}

interface PodSummary {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName?: string };
  status?: {
    phase?: string;
    initContainerStatuses?: ContainerStatus[];
    containerStatuses?: ContainerStatus[];
  };
}
interface ContainerStatus {
  name: string;
  ready: boolean;
  restartCount: number;
  state?: ContainerStates;
  lastState?: ContainerStates;
}
interface ContainerStates {
  waiting?: { reason?: string; message?: string };
  running?: { startedAt?: string };
  terminated?: { reason?: string; message?: string; exitCode?: number };
}
interface EventSummary {
  involvedObject?: { name?: string };
  reason?: string;
  message?: string;
  count?: number;
}

/** One line per pod (phase, each container's state) and the namespace's last events: what a failed wait saw. */
export async function describeNamespace(controlPlane: ControlPlane, namespace: string): Promise<string> {
  const pods = await controlPlane.api.must<{ items: PodSummary[] }>('GET', `/api/v1/namespaces/${namespace}/pods`);
  const events = await controlPlane.api.must<{ items: EventSummary[] }>('GET', `/api/v1/namespaces/${namespace}/events`);
  const container = (c: ContainerStatus) => {
    const [state, detail]: [string, { reason?: string; message?: string; exitCode?: number }] = Object.entries(c.state ?? {})[0] ?? [
      'unknown',
      {},
    ];
    const why = [detail.reason, detail.exitCode === undefined ? undefined : `exit ${detail.exitCode}`, detail.message?.slice(0, 300)]
      .filter(Boolean)
      .join(', ');
    return `${c.name}: ${state}${why ? ` (${why})` : ''}${c.restartCount ? `, ${c.restartCount} restarts` : ''}`;
  };
  const podLines = pods.items.map(
    (p) =>
      `  pod ${p.metadata.name} on ${p.spec.nodeName ?? '(unscheduled)'}: ${p.status?.phase ?? '?'}; ` +
      [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])].map(container).join('; '),
  );
  const eventLines = events.items
    .slice(-8)
    .map(
      (e) =>
        `  event ${e.involvedObject?.name ?? '?'}: ${e.reason ?? '?'}${e.count && e.count > 1 ? ` x${e.count}` : ''}: ${e.message?.slice(0, 300) ?? ''}`,
    );
  return [`namespace ${namespace}:`, ...(podLines.length ? podLines : ['  no pods']), ...eventLines].join('\n');
}
