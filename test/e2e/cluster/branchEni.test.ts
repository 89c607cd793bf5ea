// AWS branch ENI probe rules (AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE) through kubelet, on a one-node
// cluster. The node netns gets net.ipv4.tcp_early_demux=0 before the chart is installed (the agent
// reads it once, through its host /proc, in the node's netns; the host's own value is untouched),
// and one pod is laid out the way aws-vpc-cni routes a branch ENI pod, with the bridge `cni0` as its
// device: table 101 holding the pod's /32 over cni0 and `iif cni0 lookup 101` at priority 10 (the
// table has no other route, so everything else falls through to main). Enrolled (by its pod label,
// after the layout exists), the pod gets exactly upstream's two host rules; un-enrolled, both go;
// with the setting off, nothing is added.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { ipRules, setTcpEarlyDemux } from '../../support/branchEniLayout.ts';
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { runCommand } from '../support/runCommand.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { bringUp, clusterNode, DAEMONSET, helmInstall, type LocalCluster, restartDaemonSet, waitDaemonSetReady } from './localCluster.ts';
import type { RunningNode } from './node.ts';
import { snatPackets } from './probeSnat.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';
import { upgradeWith } from './upgradeProfile.ts';
import { container, createNamespace, isReady, probedHttpServer, waitFor, type Pod, waitPodReady } from './workloads.ts';
import { connectFakeZtunnel } from './ztunnelConnection.ts';

/** The branch ENI pod's namespace, not enrolled: the pod is enrolled by its own label once laid out. */
const NS = 'e2e-branch-eni';
const AMBIENT_NS = 'e2e-branch-eni-ambient';
const DATAPLANE_MODE = 'istio.io/dataplane-mode';
const REDIRECTION = 'ambient.istio.io/redirection';
const SETTING = 'AMBIENT_ENABLE_AWS_BRANCH_ENI_PROBE';
const TABLE = 101;
/** aws-vpc-cni's priority for its iif rules; upstream's return rule goes one below. */
const IIF_PRIORITY = 10;
const DEV = 'cni0';
const EARLY_DEMUX = '/proc/sys/net/ipv4/tcp_early_demux';

/** The node netns's rules with the branch ENI layout and nothing of ours (`ip -N`: local 255, main 254, default 253). */
const LAID_OUT = ['0 lookup 255', `${IIF_PRIORITY} iif ${DEV} lookup ${TABLE}`, '32766 lookup 254', '32767 lookup 253'];
/** Upstream's two rules for a branch ENI pod at `ip`, in `ip rule` order among the others. */
const withOurs = (ip: string) => [
  '0 lookup 255',
  `${IIF_PRIORITY - 1} iif ${DEV} lookup 255`,
  `${IIF_PRIORITY} iif ${DEV} lookup ${TABLE}`,
  `512 to ${ip} lookup ${TABLE}`,
  '32766 lookup 254',
  '32767 lookup 253',
];

describe('AWS branch ENI probe rules through kubelet (tcp_early_demux=0 in the node netns)', { timeout: 600_000 }, () => {
  let cluster: LocalCluster;
  let ztunnel: FakeZtunnel | undefined;
  let hostEarlyDemux: string;
  const api = () => cluster.controlPlane.api;
  const node = (): RunningNode => clusterNode(cluster, 0);
  const nodeNetns = () => ({ name: node().layout.netns, path: `/run/netns/${node().layout.netns}` });
  const inNodeNetns = async (argv: readonly string[]) => (await runCommand(['ip', 'netns', 'exec', node().layout.netns, ...argv])).stdout;
  const getPod = (name: string, namespace: string) => api().must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
  const createPod = async (name: string, namespace: string, containers: unknown[]) => {
    await api().must('POST', `/api/v1/namespaces/${namespace}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace },
      spec: { nodeName: node().layout.name, terminationGracePeriodSeconds: 1, containers },
    });
    return waitPodReady(cluster.controlPlane, name, namespace);
  };
  const readySince = (p: Pod) => p.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime;
  /** The pod's ambient label set (or removed), then until the agent annotated the pod accordingly: it syncs the branch ENI rules before. */
  const label = async (name: string, enrolled: boolean) => {
    await api().must(
      'PATCH',
      `/api/v1/namespaces/${NS}/pods/${name}`,
      { metadata: { labels: { [DATAPLANE_MODE]: enrolled ? 'ambient' : null } } },
      { contentType: 'application/merge-patch+json' },
    );
    await waitFor(
      `${NS}/${name} ${enrolled ? 'enrolled' : 'un-enrolled'} by the agent (${REDIRECTION} ${enrolled ? 'enabled' : 'removed'})`,
      async () => {
        const redirection = (await getPod(name, NS)).metadata.annotations?.[REDIRECTION];
        return (enrolled ? redirection === 'enabled' : redirection === undefined) ? true : undefined;
      },
      60_000,
      () => agentLog().then((l) => l.slice(-3000)),
    );
  };
  const agent = async () =>
    waitFor(
      `a Ready ${DAEMONSET} pod`,
      async () =>
        (
          await api().must<{ items: (Pod & { spec: { containers: { name: string; env?: { name: string; value?: string }[] }[] } })[] }>(
            'GET',
            `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`,
          )
        ).items.find((p) => p.metadata.deletionTimestamp === undefined && isReady(p)),
      60_000,
    );
  const agentLog = async () =>
    (await api().request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${(await agent()).metadata.name}/log?container=install-cni`))
      .text;
  const logged = async (msg: string, fields: Record<string, unknown> = {}) =>
    (await agentLog())
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((e) => e.msg === msg && Object.entries(fields).every(([k, v]) => e[k] === v));
  /** Which table the node's own traffic to `ip` is routed by (`ip route get`: `table N` unless main). */
  const routeTable = async (ip: string) => /\btable (\S+)/.exec(await inNodeNetns(['ip', 'route', 'get', ip]))?.[1] ?? 'main';
  const connectZtunnel = async () => {
    ztunnel?.close();
    ztunnel = await connectFakeZtunnel(cluster.controlPlane, node());
  };
  let eni: Pod;
  let eniIp: string;
  let plainIp: string;

  before(async () => {
    hostEarlyDemux = readFileSync(EARLY_DEMUX, 'utf8');
    cluster = await bringUp({ nodes: 1, image: SUITE_IMAGE, imageTar: SUITE_IMAGE_ARCHIVE, install: false });
    // Before the agent's first start: it reads the value once.
    setTcpEarlyDemux(nodeNetns(), 0);
    await helmInstall(SUITE_IMAGE, ['profile=ambient']);
    await waitDaemonSetReady(cluster.controlPlane, 1);
    await createNamespace(api(), NS);
    await createNamespace(api(), AMBIENT_NS, { [DATAPLANE_MODE]: 'ambient' });
    await connectZtunnel();
  });

  after(async () => {
    ztunnel?.close();
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
    assert.equal(readFileSync(EARLY_DEMUX, 'utf8'), hostEarlyDemux, "the host's own tcp_early_demux untouched");
  });

  it("1 tcp_early_demux is 0 in the node netns (what the agent's host /proc shows it there), the host's own value untouched", async () => {
    assert.equal((await inNodeNetns(['cat', EARLY_DEMUX])).trim(), '0');
    assert.equal(readFileSync(EARLY_DEMUX, 'utf8'), hostEarlyDemux);
  });

  it('2 a pod laid out as a branch ENI pod, enrolled: exactly the two upstream host rules, its readiness probe passing throughout through the probe SNAT over table 101; a plain ambient pod gets none', async () => {
    // No readiness probe: the SNAT counter below counts the branch ENI pod's probes only.
    const plain = await createPod('plain', AMBIENT_NS, [container('app', 'sleep 86400')]);
    plainIp = plain.status?.podIP ?? '';
    eni = await createPod('eni', NS, [probedHttpServer()]);
    eniIp = eni.status?.podIP ?? '';
    assert.match(eniIp, /^\d+\.\d+\.\d+\.\d+$/);
    await runCommand(['ip', '-n', node().layout.netns, 'route', 'add', `${eniIp}/32`, 'dev', DEV, 'table', String(TABLE)]);
    await runCommand([
      'ip',
      '-n',
      node().layout.netns,
      'rule',
      'add',
      'iif',
      DEV,
      'lookup',
      String(TABLE),
      'priority',
      String(IIF_PRIORITY),
    ]);
    assert.deepEqual(ipRules(nodeNetns()), LAID_OUT, 'the layout alone');
    assert.equal(await routeTable(eniIp), 'main', "before enrolment the node's traffic to the pod is routed by main");
    const since = readySince(eni);

    const snatBefore = await snatPackets(node(), 4);
    await label('eni', true);
    assert.deepEqual(ipRules(nodeNetns()), withOurs(eniIp), 'exactly the two upstream rules added, nothing for the plain pod');
    assert.equal(await routeTable(eniIp), String(TABLE), "the node's traffic to the pod (kubelet's probes) now routed by its table");
    assert.equal(await routeTable(plainIp), 'main');
    assert.equal((await logged('net.ipv4.tcp_early_demux=0; AWS branch ENI probe detection enabled')).length, 1);
    assert.deepEqual(
      (await logged('branch ENI pod: probe traffic routed over its veth', { ip: eniIp })).map((e) => [e.table, e.veth, e.iifPriority]),
      [[TABLE, DEV, IIF_PRIORITY]],
    );
    assert.deepEqual(await logged('branch ENI pod: probe traffic routed over its veth', { ip: plainIp }), []);
    // In-pod rules send the probe to ztunnel's inbound port (nothing listens) unless SNATed: five more
    // probes through the SNAT, and the pod never left Ready (one failed probe would have made it so).
    await waitFor(
      "5 of kubelet's probes through the SNAT rule",
      async () => ((await snatPackets(node(), 4)) >= snatBefore + 5 ? true : undefined),
      30_000,
    );
    const now = await getPod('eni', NS);
    assert.ok(isReady(now), 'the branch ENI pod Ready');
    assert.equal(readySince(now), since, 'Ready throughout (its Ready condition never changed)');
  });

  it('3 the agent restarted (start-up snapshot): the same two rules, no more', async () => {
    const before = await agent();
    await restartDaemonSet(cluster.controlPlane);
    await waitDaemonSetReady(cluster.controlPlane, 1);
    await waitFor(
      `${DAEMONSET} replaced and Ready`,
      async () => ((await agent()).metadata.uid !== before.metadata.uid ? true : undefined),
      120_000,
    );
    await connectZtunnel();
    await waitFor(
      "the new agent's branch ENI rules for the pod",
      async () => ((await logged('branch ENI pod: probe traffic routed over its veth', { ip: eniIp })).length > 0 ? true : undefined),
      60_000,
    );
    assert.deepEqual(ipRules(nodeNetns()), withOurs(eniIp));
    assert.ok(isReady(await getPod('eni', NS)));
  });

  it('4 the pod un-enrolled (its label removed): both rules deleted, its probe still passing', async () => {
    await label('eni', false);
    assert.deepEqual(ipRules(nodeNetns()), LAID_OUT);
    assert.equal((await logged('branch ENI pod: probe rules removed', { ip: eniIp })).length, 1);
    assert.equal(await routeTable(eniIp), 'main');
    assert.ok(isReady(await getPod('eni', NS)));
  });

  it(`5 ${SETTING}=false (helm upgrade): the pod enrolled again gets no rule`, async () => {
    await upgradeWith(cluster, [`env.${SETTING}=false`]);
    const env = (await agent()).spec.containers.find((c) => c.name === 'install-cni')?.env ?? [];
    assert.deepEqual(
      env.filter((e) => e.name === SETTING),
      [{ name: SETTING, value: 'false' }],
    );
    await connectZtunnel();
    await label('eni', true);
    assert.deepEqual(ipRules(nodeNetns()), LAID_OUT, 'nothing added');
    assert.equal(await routeTable(eniIp), 'main');
    assert.deepEqual(await logged('branch ENI pod: probe traffic routed over its veth'), []);
    assert.deepEqual(await logged('net.ipv4.tcp_early_demux=0; AWS branch ENI probe detection enabled'), [], 'off: not even read');
    assert.ok(isReady(await getPod('eni', NS)));
  });
});
