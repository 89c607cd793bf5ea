// The mesh audit's collector on a cluster node: each pod's intent from the API, its sandbox netns
// from the node's containerd (the pid `crictl inspectp` reports, through the node's /proc), the
// rules there, the node netns' probe sets and what the node's fake ztunnel holds. The verdict is
// test/e2e/support/podAudit.ts's.
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import type { KubeClient } from '../support/kubeClient.ts';
import { type AuditRow, inPodRules, meshIntent, probeSetAddresses, REDIRECTION_ANNOTATION } from '../support/podAudit.ts';
import { podRules } from '../support/pods.ts';
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

/** One row per pod of `namespaces` on the node, as it is now. */
export async function collectAudit(o: AuditOptions): Promise<AuditRow[]> {
  const netns = o.node.layout.netns;
  const inNodeNetns = async (argv: readonly string[]) =>
    (await runCommand(['ip', 'netns', 'exec', netns, ...argv], { allowFailure: true })).stdout;
  const probed = probeSetAddresses(await inNodeNetns(['ipset', 'save']), await inNodeNetns(['nft', 'list', 'ruleset']));
  const sandboxes = JSON.parse(await o.node.crictl(['pods', '--state', 'ready', '-o', 'json'])) as SandboxList;
  const rows: AuditRow[] = [];
  for (const namespace of o.namespaces) {
    const ns = await o.api.must<{ metadata: { labels?: Record<string, string> } }>('GET', `/api/v1/namespaces/${namespace}`);
    const pods = await o.api.must<{ items: ApiPod[] }>(
      'GET',
      `/api/v1/namespaces/${namespace}/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${o.node.layout.name}`)}`,
    );
    for (const pod of pods.items) {
      const ips = (pod.status?.podIPs ?? []).map((p) => p.ip);
      const ready = sandboxes.items.filter((s) => s.metadata.uid === pod.metadata.uid);
      let rules: AuditRow['rules'];
      if (ready.length === 1 && ready[0] !== undefined) {
        const inspected = JSON.parse(await o.node.crictl(['inspectp', ready[0].id])) as { info?: { pid?: number } };
        const pid = inspected.info?.pid;
        if (pid !== undefined && pid > 0) rules = inPodRules(await podRules(`${nodeProcPath(o.node.holder.pid, pid)}/ns/net`));
      }
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
