// The mesh audit's collector on a cluster node: each pod's intent from the API, its sandbox netns
// from the node's containerd (the pid `crictl inspectp` reports, through the node's /proc), the
// rules there, the node netns' probe sets and what the node's fake ztunnel holds. The verdict is
// test/e2e/support/podAudit.ts's.
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import type { KubeClient } from '../support/kubeClient.ts';
import { type AuditRow, inPodRulesByFamily, meshIntent, probeSetAddresses, REDIRECTION_ANNOTATION } from '../support/podAudit.ts';
import { podRuleDumps } from '../support/pods.ts';
import { runCommand } from '../support/runCommand.ts';
import { nodeProcPath, type RunningNode } from './node.ts';

interface ApiPod {
  metadata: { name: string; namespace: string; uid: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: { hostNetwork?: boolean; containers: { name: string }[] };
  status?: { podIPs?: { ip: string }[]; podIP?: string };
}

interface SandboxList {
  items: { id: string; metadata: { uid: string } }[];
}

export interface AuditOptions {
  api: KubeClient;
  node: RunningNode;
  /** Only pods of these namespaces are audited. */
  namespaces: readonly string[];
  ambientEnabled: boolean;
  /** The node's fake ztunnel; undefined when none runs. */
  ztunnel: FakeZtunnel | undefined;
}

/**
 * The network namespace of each pod with a ready sandbox on the node (by pod uid), as a path on
 * this machine (the pid `crictl inspectp` reports, through the node's /proc).
 */
export async function podNetnsPaths(node: RunningNode): Promise<Map<string, string>> {
  const sandboxes = JSON.parse(await node.crictl(['pods', '--state', 'ready', '-o', 'json'])) as SandboxList;
  const paths = new Map<string, string>();
  const seen = new Set<string>();
  for (const s of sandboxes.items) {
    // Two ready sandboxes of one pod: neither is the pod's for sure.
    if (seen.has(s.metadata.uid)) {
      paths.delete(s.metadata.uid);
      continue;
    }
    seen.add(s.metadata.uid);
    const inspected = JSON.parse(await node.crictl(['inspectp', s.id])) as { info?: { pid?: number } };
    const pid = inspected.info?.pid;
    if (pid !== undefined && pid > 0) paths.set(s.metadata.uid, `${nodeProcPath(node.holder.pid, pid)}/ns/net`);
  }
  return paths;
}

/** One row per pod of `namespaces` on the node, as it is now. */
export async function collectAudit(o: AuditOptions): Promise<AuditRow[]> {
  const netns = o.node.layout.netns;
  const inNodeNetns = async (argv: readonly string[]) =>
    (await runCommand(['ip', 'netns', 'exec', netns, ...argv], { allowFailure: true })).stdout;
  const probed = probeSetAddresses(await inNodeNetns(['ipset', 'save']), await inNodeNetns(['nft', 'list', 'ruleset']));
  const netnsPaths = await podNetnsPaths(o.node);
  const rows: AuditRow[] = [];
  for (const namespace of o.namespaces) {
    const ns = await o.api.must<{ metadata: { labels?: Record<string, string> } }>('GET', `/api/v1/namespaces/${namespace}`);
    const pods = await o.api.must<{ items: ApiPod[] }>(
      'GET',
      `/api/v1/namespaces/${namespace}/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${o.node.layout.name}`)}`,
    );
    for (const pod of pods.items) {
      const ips = (pod.status?.podIPs ?? []).map((p) => p.ip);
      const netnsPath = netnsPaths.get(pod.metadata.uid);
      const rules: AuditRow['rules'] = netnsPath === undefined ? undefined : inPodRulesByFamily(await podRuleDumps(netnsPath));
      rows.push({
        namespace,
        name: pod.metadata.name,
        uid: pod.metadata.uid,
        intent: meshIntent({
          annotations: pod.metadata.annotations ?? {},
          labels: pod.metadata.labels ?? {},
          containerNames: pod.spec.containers.map((c) => c.name),
          hostNetwork: pod.spec.hostNetwork === true,
          namespaceLabels: ns.metadata.labels ?? {},
          ambientEnabled: o.ambientEnabled,
        }),
        ips,
        rules,
        annotated: pod.metadata.annotations?.[REDIRECTION_ANNOTATION] === 'enabled',
        inProbeSet: ips.length > 0 && ips.every((ip) => probed.has(ip)),
        anyInProbeSet: ips.some((ip) => probed.has(ip)),
        ztunnelKnows: o.ztunnel === undefined ? undefined : o.ztunnel.known.has(pod.metadata.uid),
      });
    }
  }
  return rows.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}
