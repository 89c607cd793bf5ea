import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { plainPod, sidecarPod } from '../../support/meshPods.ts';
import type { Cluster } from './cluster.ts';
import type { Containerd } from './containerd.ts';
import type { RuleDumps } from './podAudit.ts';
import { runCommand } from './runCommand.ts';

export type PodKind = 'sidecar' | 'plain';

export interface StartedPod {
  namespace: string;
  name: string;
  uid: string;
  sandboxId: string;
  ip: string;
  netnsPath: string;
}

/** Creates the pod object in the API (bound to nodeName, as the scheduler would) and returns its uid. */
export async function createPodObject(
  cluster: Cluster,
  kind: PodKind,
  namespace: string,
  name: string,
  nodeName: string,
  options: PodOptions = {},
): Promise<string> {
  const template = kind === 'sidecar' ? sidecarPod(namespace, name, nodeName) : plainPod(namespace, name, nodeName);
  const spec = { ...(template.spec as Record<string, unknown>), ...(options.hostUsers === false ? { hostUsers: false } : {}) };
  const pod = await cluster.api.must<{ metadata: { uid: string } }>('POST', `/api/v1/namespaces/${namespace}/pods`, {
    apiVersion: 'v1',
    kind: 'Pod',
    ...template,
    spec,
    status: undefined,
  });
  return pod.metadata.uid;
}

export interface PodOptions {
  /**
   * `spec.hostUsers: false`: the sandbox gets a user namespace of its own, pod ids 0..65535 mapped
   * to host ids from `USERNS_HOST_BASE`, as kubelet asks the runtime (CRI `userns_options`, mode POD);
   * containerd then creates the pod's netns inside that user namespace.
   */
  hostUsers?: false;
}

/** Host id of the pod's id 0 in a `hostUsers: false` pod (kubelet allocates multiples of 65536). */
export const USERNS_HOST_BASE = 65_536 * 4;

/** What kubelet does next: RunPodSandbox through CRI, which makes containerd run the CNI chain. */
/** `attempt` counts kubelet's retries of RunPodSandbox for the same pod. */
export async function runPod(
  containerd: Containerd,
  namespace: string,
  name: string,
  uid: string,
  attempt = 0,
  options: PodOptions = {},
): Promise<StartedPod> {
  const idMapping = [{ host_id: USERNS_HOST_BASE, container_id: 0, length: 65_536 }];
  const userns =
    options.hostUsers === false
      ? { security_context: { namespace_options: { userns_options: { mode: 0, uids: idMapping, gids: idMapping } } } }
      : {};
  const sandboxId = await containerd.runPodSandbox({
    metadata: { name, namespace, uid, attempt },
    hostname: name,
    linux: { cgroup_parent: containerd.podCgroupParent(uid), ...userns },
  });
  const { status, info } = await containerd.inspectPodSandbox(sandboxId);
  const spec = info.runtimeSpec as { linux: { namespaces: { type: string; path?: string }[] } };
  const netnsPath = spec.linux.namespaces.find((n) => n.type === 'network')?.path ?? '';
  if (netnsPath === '') throw new Error(`sandbox ${sandboxId} has no network namespace path`);
  return { namespace, name, uid, sandboxId, ip: status.network?.ip ?? '', netnsPath };
}

export async function createAndRunPod(
  cluster: Cluster,
  containerd: Containerd,
  kind: PodKind,
  namespace: string,
  name: string,
  nodeName: string,
  options: PodOptions = {},
): Promise<StartedPod> {
  const uid = await createPodObject(cluster, kind, namespace, name, nodeName, options);
  return runPod(containerd, namespace, name, uid, 0, options);
}

export async function removePod(containerd: Containerd, pod: StartedPod): Promise<void> {
  await containerd.stopPodSandbox(pod.sandboxId);
  await containerd.removePodSandbox(pod.sandboxId);
}

/** iptables (both backends) and nft rules inside the pod's netns. */
export async function podRules(netnsPath: string): Promise<string> {
  const dumps = await podRuleDumps(netnsPath, { ipv6: false });
  return [dumps.iptables, dumps.nft].join('\n');
}

/** Per family: iptables-save and ip6tables-save (both backends each, unless ipv6 is false), and the nft ruleset, inside the pod's netns. */
export async function podRuleDumps(netnsPath: string, options: { ipv6?: boolean } = {}): Promise<RuleDumps> {
  const inPod = async (argv: readonly string[]) =>
    (await runCommand(['nsenter', `--net=${netnsPath}`, '--', ...argv], { allowFailure: true })).stdout;
  const both = async (legacy: string, nft: string) => `${await inPod([legacy])}\n${await inPod([nft])}`;
  return {
    iptables: await both('iptables-legacy-save', 'iptables-nft-save'),
    ip6tables: options.ipv6 === false ? '' : await both('ip6tables-legacy-save', 'ip6tables-nft-save'),
    nft: await inPod(['nft', 'list', 'ruleset']),
  };
}

export function hasSidecarCapture(rules: string): boolean {
  return /ISTIO_OUTPUT/.test(rules) && /ISTIO_INBOUND/.test(rules) && /ISTIO_REDIRECT/.test(rules);
}

export interface TrafficProbe {
  /** What an outbound connection from the pod to its gateway's port 9 (nothing listens) reached. */
  outbound: string;
  /** What a connection from the host to podIp:8080 (nothing listens there) reached. */
  inbound: string;
}

// Runs inside the pod's netns: Envoy's two capture ports answer with their own port, then one
// outbound connection to the pod's gateway (the rig's own bridge on this machine) at a port nobody
// serves. Uncaptured it is refused by this machine; the probe never sends traffic off the machine.
const PROBE_SCRIPT = `
const net = require('node:net');
const serve = (port) => new Promise((ok) => net.createServer((s) => s.end('port ' + port)).listen(port, '0.0.0.0', ok));
Promise.all([serve(15001), serve(15006)]).then(() => {
  console.log('ready');
  const s = net.connect({ host: process.argv[1], port: 9 });
  let data = '';
  s.setTimeout(3000, () => { console.log('outbound timeout'); s.destroy(); });
  s.on('data', (d) => (data += d));
  s.on('end', () => console.log('outbound ' + data));
  s.on('error', (e) => console.log('outbound ' + e.code));
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`;

async function connectOnce(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    let data = '';
    s.setTimeout(3000, () => {
      resolve('timeout');
      s.destroy();
    });
    s.on('data', (d: Buffer) => (data += d.toString()));
    s.on('end', () => resolve(data));
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

const CONNECT_SCRIPT = `
const s = require('node:net').connect({ host: process.argv[1], port: Number(process.argv[2]) });
let data = '';
s.setTimeout(3000, () => { console.log('timeout'); s.destroy(); });
s.on('data', (d) => (data += d));
s.on('end', () => console.log(data));
s.on('error', (e) => console.log(e.code));
`;

/** One connection made from inside another netns (a second pod); what answered, or the error code. */
export async function connectFromNetns(netnsPath: string, host: string, port: number): Promise<string> {
  const { stdout } = await runCommand(['nsenter', `--net=${netnsPath}`, '--', process.execPath, '-e', CONNECT_SCRIPT, host, String(port)], {
    timeoutMs: 10_000,
  });
  return stdout.trim();
}

/**
 * Sends real traffic both ways and reports where it landed: `port 15001` / `port 15006` means
 * captured. The inbound connection comes from the host unless `inboundFrom` names a netns.
 */
export async function probeTraffic(pod: StartedPod, options: { inboundFrom?: string } = {}): Promise<TrafficProbe> {
  const gateway = pod.ip.replace(/\.\d+$/, '.1');
  const child = spawn('nsenter', [`--net=${pod.netnsPath}`, '--', process.execPath, '-e', PROBE_SCRIPT, gateway], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  try {
    const lines = createInterface({ input: child.stdout });
    const iterator = lines[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const timer = new Promise<string>((_, reject) => setTimeout(() => reject(new Error('traffic probe gave no answer')), 10_000).unref());
      const r = await Promise.race([iterator.next(), timer]);
      if (typeof r === 'string' || r.done === true) throw new Error('traffic probe ended early');
      return r.value;
    };
    if ((await next()) !== 'ready') throw new Error('traffic probe did not start');
    const inbound =
      options.inboundFrom === undefined ? await connectOnce(pod.ip, 8080) : await connectFromNetns(options.inboundFrom, pod.ip, 8080);
    const outbound = (await next()).replace(/^outbound /, '');
    return { outbound, inbound };
  } finally {
    child.stdin?.end();
    child.kill('SIGKILL');
  }
}

export interface ContainerTermination {
  exitCode: number;
  reason?: string;
  message?: string;
}

/**
 * What kubelet reports once the sandbox runs: phase, podIP/podIPs, and optionally an init
 * container whose last run terminated (state waiting in CrashLoopBackOff), through the real
 * API's `pods/status` subresource with admin credentials.
 */
export async function reportPodStatus(
  cluster: Cluster,
  pod: StartedPod,
  options: { phase?: string; initContainer?: { name: string; lastTerminated: ContainerTermination } } = {},
): Promise<void> {
  const status: Record<string, unknown> = {
    phase: options.phase ?? 'Running',
    podIP: pod.ip,
    podIPs: [{ ip: pod.ip }],
    hostIP: '127.0.0.1',
  };
  if (options.initContainer !== undefined) {
    const { name, lastTerminated } = options.initContainer;
    status.initContainerStatuses = [
      {
        name,
        image: 'docker.io/istio/proxyv2:1.24.0',
        imageID: '',
        ready: false,
        restartCount: 1,
        started: false,
        state: { waiting: { reason: 'CrashLoopBackOff', message: `back-off restarting failed container ${name}` } },
        lastState: {
          terminated: {
            exitCode: lastTerminated.exitCode,
            reason: lastTerminated.reason ?? 'Error',
            ...(lastTerminated.message !== undefined ? { message: lastTerminated.message } : {}),
            startedAt: new Date(Date.now() - 2000).toISOString(),
            finishedAt: new Date(Date.now() - 1000).toISOString(),
          },
        },
      },
    ];
  }
  await cluster.api.must(
    'PATCH',
    `/api/v1/namespaces/${pod.namespace}/pods/${pod.name}/status`,
    { status },
    {
      contentType: 'application/merge-patch+json',
    },
  );
}

/** The pod's annotations as the real API serves them. */
export async function podAnnotations(cluster: Cluster, namespace: string, name: string): Promise<Record<string, string>> {
  const pod = await cluster.api.must<{ metadata: { annotations?: Record<string, string> } }>(
    'GET',
    `/api/v1/namespaces/${namespace}/pods/${name}`,
  );
  return pod.metadata.annotations ?? {};
}
