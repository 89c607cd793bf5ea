// Switching a live two-node cluster from upstream Istio's Go agent to ours and back the way an
// operator would: upstream's own chart (unchanged, from the pinned istio.io/istio module, `make
// upstream-chart`) running upstream's binaries (`make upstream-image`), then `helm upgrade` of the
// same release to our chart with the same values file (only the chart and the image change),
// `helm rollback`, and `helm upgrade` to ours again. First with the default profile (sidecar and
// plain pods), then the same release moved to profile=ambient on upstream's chart (ambient pods
// with a kubelet readiness probe, a fake ztunnel per node recording every ZDS message), switched
// the same way. Every pod runs a connection loop through every switch.
//
// The bar at every switch: every running pod's capture rules byte-identical before and after (per
// netns, per backend); no duplicate host rules, chains or probe-set entries; no ZDS Del for a
// running pod and the new agent's snapshot holds every enrolled pod; no readiness-probe failure;
// no connection-loop failure; no pod restarted, replaced or repaired; pods created after the switch
// captured by the new agent, then running; the mesh audit (audit.ts) clean on both nodes.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import { auditFailures, auditTable, type AuditRow } from '../support/podAudit.ts';
import { REPO_ROOT } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';
import {
  changedLines,
  failedTicks,
  hostDuplicates,
  isSecondCopyInLegacy,
  legacyHoldsNoRules,
  normalizeRuleDump,
  type BackendDump,
} from '../support/switchChecks.ts';
import { collectAudit, podNetnsPaths } from './audit.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { CLUSTER_DIR, SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { bringUp, DAEMONSET, describeNamespace, helm, requireImage, waitDaemonSetReady, type LocalCluster } from './localCluster.ts';
import { nodePrivateDir, type RunningNode } from './node.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';
import { connectFakeZtunnel } from './ztunnelConnection.ts';
import {
  container,
  isReady,
  NOWHERE,
  probeLoop,
  serve,
  validationContainer,
  waitFor,
  whenListening,
  type Pod,
  createNamespace as createNamespaceAndWait,
} from './workloads.ts';

/** mk/image.mk passes these (`make upstream-image`, `make upstream-chart`). */
const UPSTREAM_IMAGE = process.env.UPSTREAM_IMAGE ?? '';
const UPSTREAM_IMAGE_ARCHIVE = resolve(REPO_ROOT, process.env.UPSTREAM_IMAGE_ARCHIVE ?? 'dist/image-upstream.oci.tar');
const UPSTREAM_CHART_DIR = process.env.UPSTREAM_CHART_DIR ?? '';

const NS = 'e2e-switch';
const AMBIENT_NS = 'e2e-switch-ambient';
/** What each kind's connection loop must get on every tick (a plain pod's must never be captured). */
const ANSWER = { sidecar: 'proxy-15001', plain: 'none', ambient: 'ztunnel-15001' } as const;
type Kind = keyof typeof ANSWER;

/** The operator's values file, the same for both charts (the image is the only `--set`). */
const OPERATOR_VALUES = `# An operator's values for the istio-cni chart (upstream's or ours: the same file).
pullPolicy: Never
logging:
  level: info
excludeNamespaces:
  - kube-system
repair:
  enabled: true
resources:
  requests:
    cpu: 50m
    memory: 64Mi
`;

/** The backends whose `-save` is compared per pod netns and on the host. */
const SAVE_COMMANDS = ['iptables-legacy', 'iptables-nft', 'ip6tables-legacy', 'ip6tables-nft'] as const;

interface NodeSnapshot {
  /** Per pod uid, per backend (`iptables-legacy`, ..., `nft`): the normalized dump. */
  podRules: Map<string, Map<string, string>>;
  host: BackendDump[];
  hostNft: string;
  ipset: string;
  /** Node files the agents write (CNI config dir, plugin, plugin kubeconfig): path → sha256 and text. */
  files: Map<string, { sha: string; text: string | undefined }>;
}

type ApiPod = Pod & { metadata: { namespace?: string; labels?: Record<string, string> } };

interface ClusterSnapshot {
  nodes: Map<string, NodeSnapshot>;
  pods: Map<string, ApiPod>;
}

/** Per pod netns and backend, what changed between two snapshots of one node (pods in both). */
interface PodRuleChange {
  uid: string;
  backend: string;
  changed: string[];
  before: string;
  after: string;
}

/** Per pod netns and backend, what changed between two snapshots of one node (pods in both). */
function podRuleChangeList(before: NodeSnapshot, after: NodeSnapshot): PodRuleChange[] {
  const changes: PodRuleChange[] = [];
  for (const [uid, rules] of before.podRules) {
    const now = after.podRules.get(uid);
    if (now === undefined) continue;
    for (const [backend, text] of rules) {
      const changed = changedLines(text, now.get(backend) ?? '');
      if (changed.length > 0) changes.push({ uid, backend, changed, before: text, after: now.get(backend) ?? '' });
    }
  }
  return changes;
}

const describeChange = (node: string, name: string, c: PodRuleChange) =>
  `${node} ${name} ${c.backend} rules changed:\n    ${c.changed.slice(0, 12).join('\n    ')}`;

function podRuleChanges(node: string, before: NodeSnapshot, after: NodeSnapshot, podName: (uid: string) => string): string[] {
  return podRuleChangeList(before, after).map((c) => describeChange(node, podName(c.uid), c));
}

/**
 * The two helm lines README.md's "Switching from upstream's istio-cni" prints, as argv (without
 * `helm`), so the test runs what an operator reads: its `values.yaml` becomes the test's values
 * file, `$(make -s image-name)` the suite's image, the chart path the checkout's.
 */
function readmeSwitchCommands(): { upgrade: (values: string) => string[]; rollback: string[] } {
  const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf("## Switching from upstream's istio-cni");
  assert.ok(start >= 0, 'README.md has a "Switching from upstream\'s istio-cni" section');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const line = (prefix: string) => {
    const found = section.split('\n').filter((l) => l.startsWith(prefix));
    assert.equal(found.length, 1, `one \`${prefix}…\` line in README.md's switching section`);
    return (found[0] ?? '').split(' ').slice(1);
  };
  const upgrade = line(`helm upgrade ${RELEASE_NAME} `);
  const rollback = line(`helm rollback ${RELEASE_NAME} `);
  assert.deepEqual(rollback, ['rollback', RELEASE_NAME, '--namespace', RELEASE_NAMESPACE]);
  for (const token of ['manifests/charts/istio-cni', 'values.yaml', 'image=$(make', '-s', 'image-name)'])
    assert.ok(upgrade.includes(token), `README.md's helm upgrade line has ${token}`);
  return {
    upgrade: (values) => {
      const argv = upgrade.join(' ').replace('image=$(make -s image-name)', `image=${SUITE_IMAGE}`).split(' ');
      return argv.map((a) => (a === 'values.yaml' ? values : a === 'manifests/charts/istio-cni' ? CHART_DIR : a));
    },
    rollback,
  };
}

describe('switching a live cluster between upstream Istio’s agent and ours with helm', { timeout: 1_500_000 }, () => {
  let cluster: LocalCluster;
  const valuesFile = join(CLUSTER_DIR, 'operator-values.yaml');
  const ambientValuesFile = join(CLUSTER_DIR, 'operator-values-ambient.yaml');
  const ztunnels = new Map<string, FakeZtunnel>();
  /** Every fake ztunnel connection made, per node (their Dels are checked). */
  const ztunnelHistory: { node: string; zt: FakeZtunnel }[] = [];
  const kinds = new Map<string, Kind>();
  let created = 0;
  const api = () => cluster.controlPlane.api;

  const createNamespace = (name: string, labels: Record<string, string> = {}) => createNamespaceAndWait(api(), name, labels);
  const createPod = async (kind: Kind, node: RunningNode) => {
    const name = `${kind}-${node.layout.name}-${++created}`;
    kinds.set(name, kind);
    const namespace = kind === 'ambient' ? AMBIENT_NS : NS;
    const loop = probeLoop(NOWHERE, 80);
    const spec =
      kind === 'sidecar'
        ? {
            initContainers: [validationContainer()],
            containers: [
              container('istio-proxy', serve(15001, ANSWER.sidecar), 1337),
              container('app', whenListening(15001, ANSWER.sidecar, loop)),
            ],
          }
        : kind === 'ambient'
          ? {
              containers: [
                // Stands in for ztunnel's in-pod outbound listener: captured outbound connections reach it.
                container('ztunnel-outbound', serve(15001, ANSWER.ambient)),
                {
                  ...container('server', serve(8080, 'server-8080')),
                  readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1, failureThreshold: 1, timeoutSeconds: 1 },
                },
                container('app', whenListening(15001, ANSWER.ambient, loop)),
              ],
            }
          : { containers: [container('server', serve(8080, 'server-8080')), container('app', loop)] };
    await api().must('POST', `/api/v1/namespaces/${namespace}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace, annotations: kind === 'sidecar' ? { 'sidecar.istio.io/status': SIDECAR_STATUS } : {} },
      spec: { nodeName: node.layout.name, terminationGracePeriodSeconds: 1, ...spec },
    });
  };
  const namespaces = (ambient: boolean) => (ambient ? [NS, AMBIENT_NS] : [NS]);
  const listPods = async (ambient: boolean) =>
    (
      await Promise.all(
        namespaces(ambient).map(async (ns) => (await api().must<{ items: ApiPod[] }>('GET', `/api/v1/namespaces/${ns}/pods`)).items),
      )
    ).flat();
  const waitAllReady = (ambient: boolean) =>
    waitFor(
      'every pod Ready',
      async () => ((await listPods(ambient)).every(isReady) ? true : undefined),
      180_000,
      async () => (await Promise.all(namespaces(ambient).map((ns) => describeNamespace(cluster.controlPlane, ns)))).join('\n'),
    );
  const agents = async () =>
    (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)).items;

  const connectZtunnel = async (node: RunningNode): Promise<FakeZtunnel> => {
    const zt = await connectFakeZtunnel(cluster.controlPlane, node);
    ztunnels.set(node.layout.name, zt);
    ztunnelHistory.push({ node: node.layout.name, zt });
    await zt.waitFor(() => zt.snapshots[0] === 1, `${node.layout.name}: the agent's snapshot`, 30_000);
    return zt;
  };

  const inNetns = async (netnsPath: string, argv: readonly string[]) =>
    (await runCommand(['nsenter', `--net=${netnsPath}`, '--', ...argv], { allowFailure: true })).stdout;
  const nodeNetns = (node: RunningNode) => `/run/netns/${node.layout.netns}`;

  const snapshotNode = async (node: RunningNode): Promise<NodeSnapshot> => {
    const podRules = new Map<string, Map<string, string>>();
    for (const [uid, path] of await podNetnsPaths(node)) {
      const perBackend = new Map<string, string>();
      for (const b of SAVE_COMMANDS) perBackend.set(b, normalizeRuleDump(await inNetns(path, [`${b}-save`])));
      perBackend.set('nft', normalizeRuleDump(await inNetns(path, ['nft', 'list', 'ruleset'])));
      podRules.set(uid, perBackend);
    }
    const host: BackendDump[] = [];
    for (const b of SAVE_COMMANDS) host.push({ backend: b, text: await inNetns(nodeNetns(node), [`${b}-save`]) });
    const files = new Map<string, { sha: string; text: string | undefined }>();
    const netD = nodePrivateDir(node.layout, '/etc/cni/net.d');
    const paths = [
      ...readdirSync(netD).map((f) => ['/etc/cni/net.d', f, join(netD, f)] as const),
      ['/opt/cni/bin', 'istio-cni', join(nodePrivateDir(node.layout, '/opt/cni/bin'), 'istio-cni')] as const,
      ['/run/istio-cni', 'istio-cni-kubeconfig', join(nodePrivateDir(node.layout, '/run/istio-cni'), 'istio-cni-kubeconfig')] as const,
    ];
    for (const [dir, name, path] of paths) {
      if (!existsSync(path)) continue;
      const bytes = readFileSync(path);
      files.set(`${dir}/${name}`, {
        sha: createHash('sha256').update(bytes).digest('hex').slice(0, 16),
        text: dir === '/opt/cni/bin' ? undefined : bytes.toString('utf8'),
      });
    }
    return {
      podRules,
      host,
      hostNft: normalizeRuleDump(await inNetns(nodeNetns(node), ['nft', 'list', 'ruleset'])),
      ipset: await inNetns(nodeNetns(node), ['ipset', 'save']),
      files,
    };
  };
  const snapshot = async (ambient: boolean): Promise<ClusterSnapshot> => {
    const nodes = new Map<string, NodeSnapshot>();
    for (const node of cluster.nodes) nodes.set(node.layout.name, await snapshotNode(node));
    const pods = new Map((await listPods(ambient)).map((p) => [p.metadata.uid, p] as const));
    return { nodes, pods };
  };
  const auditNode = (node: RunningNode, ambient: boolean): Promise<AuditRow[]> =>
    collectAudit({ api: api(), node, namespaces: namespaces(ambient), ambientEnabled: ambient, ztunnel: ztunnels.get(node.layout.name) });
  const audit = async (ambient: boolean): Promise<AuditRow[]> =>
    (await Promise.all(cluster.nodes.map((n) => auditNode(n, ambient)))).flat();
  /** The last snapshot taken after a switch: the next switch first checks nothing changed since. */
  let lastSnapshot: ClusterSnapshot | undefined;
  /** Per pod and backend, its rules before upstream's agent added a second copy (see switchAgents). */
  const rulesBeforeUpstreamCopy = new Map<string, Map<string, string>>();
  const restarts = (p: Pod) =>
    [...(p.status?.containerStatuses ?? [])].reduce((n, c) => n + c.restartCount, 0) +
    ((p.status as { initContainerStatuses?: { restartCount?: number }[] } | undefined)?.initContainerStatuses ?? []).reduce(
      (n, c) => n + (c.restartCount ?? 0),
      0,
    );
  const loopFailures = async (pods: Iterable<ApiPod>) => {
    const failures: string[] = [];
    for (const p of pods) {
      const kind = kinds.get(p.metadata.name);
      if (kind === undefined) continue;
      const log = (await api().request('GET', `/api/v1/namespaces/${p.metadata.namespace}/pods/${p.metadata.name}/log?container=app`)).text;
      const ticks = log.split('\n').filter((l) => l.startsWith('tick:')).length;
      const failed = failedTicks(log, ANSWER[kind]);
      if (ticks === 0) failures.push(`${p.metadata.name}: no tick logged`);
      if (failed.length > 0)
        failures.push(`${p.metadata.name}: ${failed.length} of ${ticks} tick(s) failed (${failed.slice(0, 3).join(', ')})`);
    }
    return failures;
  };
  const events = async (ambient: boolean, reasons: readonly string[], since: number) =>
    (
      await Promise.all(
        namespaces(ambient).map(
          async (ns) =>
            (
              await api().must<{
                items: {
                  reason?: string;
                  message?: string;
                  involvedObject?: { name?: string };
                  lastTimestamp?: string | null;
                  eventTime?: string | null;
                  count?: number;
                }[];
              }>('GET', `/api/v1/namespaces/${ns}/events`)
            ).items,
        ),
      )
    )
      .flat()
      .filter(
        (e) => reasons.includes(e.reason ?? '') && Date.parse(e.lastTimestamp ?? e.eventTime ?? '') >= Math.floor(since / 1000) * 1000,
      );

  /**
   * Runs `helmArgs`, waits until every node's agent is a new one and Ready, reconnects the fake
   * ztunnels (ambient), then checks the bar and creates a pod of each kind per node under the new agent.
   */
  const switchAgents = async (t: TestContext, label: string, helmArgs: readonly string[], ambient: boolean) => {
    const enrolled = new Map<string, string[]>();
    for (const node of cluster.nodes) {
      const rows = await auditNode(node, ambient);
      assert.deepEqual(auditFailures(rows), [], `the audit of ${node.layout.name} is clean before ${label}:\n${auditTable(rows)}`);
      enrolled.set(
        node.layout.name,
        rows.filter((r) => r.intent === 'ambient').map((r) => r.uid),
      );
    }
    const before = await snapshot(ambient);
    const podName = (uid: string) => before.pods.get(uid)?.metadata.name ?? uid;
    const problems: string[] = [];
    // Nothing rewrote a pod's rules between the previous switch and this one either.
    for (const node of cluster.nodes) {
      const last = lastSnapshot?.nodes.get(node.layout.name);
      const now = before.nodes.get(node.layout.name);
      if (last !== undefined && now !== undefined)
        problems.push(...podRuleChanges(`${node.layout.name} (since the previous switch)`, last, now, podName));
    }
    const oldAgents = new Set((await agents()).map((a) => a.metadata.uid));
    // Pods' readiness sampled through the switch.
    const notReadySeen: { name: string; at: string }[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const p of await listPods(ambient))
          if (!isReady(p)) notReadySeen.push({ name: p.metadata.name, at: new Date().toISOString() });
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();

    const startedAt = Date.now();
    await helm(helmArgs);
    const helmDoneAt = Date.now();
    await waitFor(
      `every ${DAEMONSET} pod replaced and Ready after ${label}`,
      async () => {
        const now = (await agents()).filter((a) => a.metadata.deletionTimestamp === undefined);
        return now.length === cluster.nodes.length && now.every((a) => !oldAgents.has(a.metadata.uid) && isReady(a)) ? true : undefined;
      },
      240_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
    const readyAt = Date.now();
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length);
    const images = [
      ...new Set((await agents()).flatMap((a) => ((a.spec as { containers?: { image: string }[] }).containers ?? []).map((c) => c.image))),
    ];

    const zdsProblems: string[] = [];
    if (ambient) {
      for (const node of cluster.nodes) {
        const old = ztunnels.get(node.layout.name);
        const zt = await connectZtunnel(node);
        old?.close();
        const inSnapshot = new Set(zt.adds.filter((a) => a.inSnapshot).map((a) => a.uid));
        for (const uid of enrolled.get(node.layout.name) ?? [])
          if (!inSnapshot.has(uid))
            zdsProblems.push(`${node.layout.name}: the new agent's snapshot lacks ${before.pods.get(uid)?.metadata.name}`);
        if (zt.fdProblems.length > 0) zdsProblems.push(`${node.layout.name}: ${zt.fdProblems.join('; ')}`);
      }
    }
    // A moment for what the new agents do right after turning Ready; later rewrites are caught by
    // the next switch's comparison with this one's end state.
    await new Promise((r) => setTimeout(r, 2000));
    const after = await snapshot(ambient);
    sampling = false;
    await sampler;

    problems.push(...zdsProblems);
    const rewritten: string[] = [];
    const toUpstream = images.includes(UPSTREAM_IMAGE);
    const upstreamCopies: string[] = [];
    const removedCopies: string[] = [];
    for (const node of cluster.nodes) {
      const b = before.nodes.get(node.layout.name);
      const a = after.nodes.get(node.layout.name);
      assert.ok(b !== undefined && a !== undefined);
      for (const uid of b.podRules.keys())
        if (before.pods.has(uid) && !a.podRules.has(uid)) problems.push(`${podName(uid)}: its netns is gone`);
      // Upstream's detection picks legacy on a node whose legacy tables hold only the empty tables
      // its own earlier probe left, and then writes a second copy of every pod's and the host's
      // rules there (docs/upstream-compat.md "Switching agents with helm"): reported, not failed,
      // when that is all that changed; the next switch to ours must bring each pod back to its
      // rules from before that copy.
      const upstreamFlip = toUpstream && legacyHoldsNoRules(b.host);
      for (const c of podRuleChangeList(b, a)) {
        const name = podName(c.uid);
        if (upstreamFlip && isSecondCopyInLegacy(c.backend, c.changed)) {
          upstreamCopies.push(`${node.layout.name} ${name} ${c.backend} (+${c.changed.length} lines)`);
          const perBackend = rulesBeforeUpstreamCopy.get(c.uid) ?? new Map<string, string>();
          if (!perBackend.has(c.backend)) perBackend.set(c.backend, c.before);
          rulesBeforeUpstreamCopy.set(c.uid, perBackend);
          continue;
        }
        // Ours removes the copy; the legacy tables it sat in stay, empty (a legacy table cannot be
        // removed from a netns), so the pod's rules are what they were plus empty built-in tables.
        const original = rulesBeforeUpstreamCopy.get(c.uid)?.get(c.backend);
        const copyRemoved =
          original !== undefined &&
          c.changed.every((l) => l.startsWith('- ')) &&
          legacyHoldsNoRules([{ backend: c.backend, text: c.after }]) &&
          changedLines(original, c.after).every((l) => /^\+ (\*\w+|COMMIT|:[A-Z]+ ACCEPT \[0:0\])$/.test(l));
        if (!toUpstream && copyRemoved) {
          removedCopies.push(`${node.layout.name} ${name} ${c.backend}`);
          rulesBeforeUpstreamCopy.get(c.uid)?.delete(c.backend);
          continue;
        }
        problems.push(describeChange(node.layout.name, name, c));
      }
      const dupes = hostDuplicates(a.host, a.ipset);
      for (const d of dupes) {
        if (upstreamFlip && /^ipv[46] nat ISTIO_POSTRT in ip6?tables-legacy and ip6?tables-nft$/.test(d))
          upstreamCopies.push(`${node.layout.name} host: ${d}`);
        else problems.push(`${node.layout.name} host duplicate: ${d}`);
      }
      for (const hb of b.host) {
        const ha = a.host.find((h) => h.backend === hb.backend);
        const changed = changedLines(normalizeRuleDump(hb.text), normalizeRuleDump(ha?.text ?? ''));
        if (changed.length > 0) rewritten.push(`${node.layout.name} host ${hb.backend}:\n    ${changed.join('\n    ')}`);
      }
      const nftChanged = changedLines(b.hostNft, a.hostNft).filter((l) => /istio/i.test(l));
      if (nftChanged.length > 0) rewritten.push(`${node.layout.name} host nft (istio lines):\n    ${nftChanged.join('\n    ')}`);
      const ipsetChanged = changedLines(b.ipset, a.ipset);
      if (ipsetChanged.length > 0) rewritten.push(`${node.layout.name} ipset:\n    ${ipsetChanged.join('\n    ')}`);
      for (const path of new Set([...b.files.keys(), ...a.files.keys()])) {
        const fb = b.files.get(path);
        const fa = a.files.get(path);
        if (fb?.sha === fa?.sha) continue;
        const detail =
          fb?.text !== undefined && fa?.text !== undefined
            ? `\n    ${changedLines(fb.text, fa.text)
                .slice(0, 20)
                .map((l) => l.replace(/(token: )\S+/, '$1<a new token>'))
                .join('\n    ')}`
            : '';
        rewritten.push(
          `${node.layout.name} ${path}: ${fb === undefined ? 'created' : fa === undefined ? 'removed' : 'rewritten'}${detail}`,
        );
      }
    }
    if (!toUpstream)
      for (const [uid, perBackend] of rulesBeforeUpstreamCopy)
        for (const backend of perBackend.keys())
          if (after.pods.has(uid)) problems.push(`${podName(uid)}: still holds upstream's second copy in ${backend}`);
    // The same pods (uids), none restarted, none repaired, annotations as they were.
    for (const [uid, p] of before.pods) {
      const now = after.pods.get(uid);
      if (now === undefined) {
        problems.push(`${p.metadata.name}: deleted or replaced`);
        continue;
      }
      if (restarts(now) !== restarts(p)) problems.push(`${p.metadata.name}: restarted (${restarts(p)} → ${restarts(now)})`);
      if (now.metadata.labels?.['cni.istio.io/uninitialized'] !== undefined) problems.push(`${p.metadata.name}: labelled broken by repair`);
      const annotations = (x: Pod) =>
        Object.entries(x.metadata.annotations ?? {})
          .map(([k, v]) => `${k}=${v}`)
          .sort()
          .join('\n');
      const changed = changedLines(annotations(p), annotations(now));
      if (changed.length > 0) rewritten.push(`${p.metadata.name} annotations: ${changed.join(', ')}`);
    }
    if (after.pods.size !== before.pods.size) problems.push(`${before.pods.size} pods before, ${after.pods.size} after`);
    // Upstream's agent empties the probe sets at every start (`createHostNetworkAddrSetManager` in
    // upstream's cni/pkg/nodeagent/server_linux.go flushes them) and refills them from its
    // snapshot: until then kubelet's probes of ambient pods are not SNATed and can fail. Its own
    // restarts do the same; ours never empties them. So an ambient pod's readiness failure while
    // upstream's agent starts is reported, not failed; any other pod's, or with ours starting, fails.
    const upstreamsProbeWindow = (name: string) => toUpstream && kinds.get(name) === 'ambient';
    const probeFailuresOfUpstream: string[] = [];
    for (const n of notReadySeen) {
      if (upstreamsProbeWindow(n.name)) probeFailuresOfUpstream.push(`not Ready at ${n.at}: ${n.name}`);
      else if (problems.filter((p) => p.startsWith('not Ready')).length < 5)
        problems.push(`not Ready during the switch: ${n.name} at ${n.at}`);
    }
    for (const e of await events(ambient, ['Unhealthy', 'DeleteBrokenPod', 'LabelBrokenPod', 'FailedCreatePodSandBox'], startedAt)) {
      const what = `event ${e.reason} ${e.involvedObject?.name}: ${(e.message ?? '').slice(0, 200)}`;
      if (e.reason === 'Unhealthy' && upstreamsProbeWindow(e.involvedObject?.name ?? '')) probeFailuresOfUpstream.push(what);
      else problems.push(what);
    }
    if (probeFailuresOfUpstream.length > 0)
      t.diagnostic(
        `${label}: readiness probes failed while upstream's agent refilled the probe sets it empties at start:\n  ${probeFailuresOfUpstream.join('\n  ')}`,
      );
    problems.push(...(await loopFailures(after.pods.values())));
    for (const { node, zt } of ztunnelHistory)
      for (const uid of zt.dels)
        if (after.pods.has(uid)) problems.push(`${node}: ZDS Del for running pod ${after.pods.get(uid)?.metadata.name}`);

    // Pods created under the new agent: captured, then running.
    for (const node of cluster.nodes) {
      await createPod('sidecar', node);
      if (ambient) await createPod('ambient', node);
    }
    await waitAllReady(ambient);
    const finalAudit = await waitFor(
      `the audit clean after ${label}`,
      async () => {
        const rows = await audit(ambient);
        return rows.length === (await listPods(ambient)).length && auditFailures(rows).length === 0 ? rows : undefined;
      },
      60_000,
      async () => auditTable(await audit(ambient)),
    );
    problems.push(...(await loopFailures(await listPods(ambient))));
    lastSnapshot = await snapshot(ambient);

    t.diagnostic(
      `${label}: \`helm ${helmArgs.join(' ')}\` took ${((helmDoneAt - startedAt) / 1000).toFixed(1)} s; both agents replaced and Ready ` +
        `${((readyAt - startedAt) / 1000).toFixed(1)} s after it started (agent image ${images.join(', ')}); ${before.pods.size} running pods compared`,
    );
    if (upstreamCopies.length > 0)
      t.diagnostic(
        `${label}: upstream's agent flipped to iptables-legacy (its own empty tables) and added a second copy:\n  ${upstreamCopies.join('\n  ')}`,
      );
    if (removedCopies.length > 0)
      t.diagnostic(
        `${label}: our agent removed upstream's second copy, back to the pod's rules before it:\n  ${removedCopies.join('\n  ')}`,
      );
    t.diagnostic(`${label}: what the new agents changed:\n${rewritten.length ? rewritten.map((r) => `  ${r}`).join('\n') : '  nothing'}`);
    t.diagnostic(`${label}: after the switch and ${cluster.nodes.length * (ambient ? 2 : 1)} new pods:\n${auditTable(finalAudit)}`);
    assert.deepEqual(problems, [], `${label}: the switch disturbed something`);
  };

  const readme = readmeSwitchCommands();
  const upgradeToOurs = (values: string) => readme.upgrade(values);
  const upgradeToUpstream = (values: string) => [
    'upgrade',
    RELEASE_NAME,
    UPSTREAM_CHART_DIR,
    '--namespace',
    RELEASE_NAMESPACE,
    '-f',
    values,
    '--set',
    `image=${UPSTREAM_IMAGE}`,
  ];
  const rollback = readme.rollback;

  before(async () => {
    assert.ok(UPSTREAM_IMAGE !== '', 'UPSTREAM_IMAGE is not set: run through `make e2e-cluster` (mk/image.mk sets it)');
    assert.ok(
      UPSTREAM_CHART_DIR !== '' && existsSync(join(UPSTREAM_CHART_DIR, 'Chart.yaml')),
      `UPSTREAM_CHART_DIR (${UPSTREAM_CHART_DIR}) holds no chart: run \`make upstream-chart\``,
    );
    cluster = await bringUp({
      nodes: 2,
      image: SUITE_IMAGE,
      imageTar: SUITE_IMAGE_ARCHIVE,
      extraImageTars: [UPSTREAM_IMAGE_ARCHIVE],
      install: false,
    });
    for (const node of cluster.nodes) await requireImage(node, UPSTREAM_IMAGE, UPSTREAM_IMAGE_ARCHIVE);
    writeFileSync(valuesFile, OPERATOR_VALUES);
    writeFileSync(ambientValuesFile, `${OPERATOR_VALUES}profile: ambient\n`);
    await helm([
      'install',
      RELEASE_NAME,
      UPSTREAM_CHART_DIR,
      '--namespace',
      RELEASE_NAMESPACE,
      '--create-namespace',
      '-f',
      valuesFile,
      '--set',
      `image=${UPSTREAM_IMAGE}`,
    ]);
    await waitDaemonSetReady(cluster.controlPlane, cluster.nodes.length);
    await createNamespace(NS);
  });

  after(async () => {
    for (const zt of ztunnels.values()) zt.close();
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('default profile: upstream → ours → rollback → ours, sidecar and plain pods undisturbed', { timeout: 600_000 }, async (t) => {
    for (const node of cluster.nodes) {
      await createPod('sidecar', node);
      await createPod('plain', node);
    }
    await waitAllReady(false);
    await switchAgents(t, 'upstream → ours (helm upgrade)', upgradeToOurs(valuesFile), false);
    await switchAgents(t, 'ours → upstream (helm rollback)', rollback, false);
    await switchAgents(t, 'upstream → ours again (helm upgrade)', upgradeToOurs(valuesFile), false);
  });

  it('profile=ambient: upstream → ours → rollback → ours, ambient and sidecar pods undisturbed, ztunnel told nothing wrong', {
    timeout: 720_000,
  }, async (t) => {
    // The operator turns ambient on with upstream's chart, then switches.
    await switchAgents(t, 'ours → upstream with profile=ambient (helm upgrade)', upgradeToUpstream(ambientValuesFile), false);
    for (const node of cluster.nodes) await connectZtunnel(node);
    await createNamespace(AMBIENT_NS, { 'istio.io/dataplane-mode': 'ambient' });
    for (const node of cluster.nodes) await createPod('ambient', node);
    await waitAllReady(true);
    await switchAgents(t, 'ambient: upstream → ours (helm upgrade)', upgradeToOurs(ambientValuesFile), true);
    await switchAgents(t, 'ambient: ours → upstream (helm rollback)', rollback, true);
    await switchAgents(t, 'ambient: upstream → ours again (helm upgrade)', upgradeToOurs(ambientValuesFile), true);
    // And the agent left in place rewrites nothing afterwards either.
    const last = lastSnapshot;
    const now = await snapshot(true);
    const changed = cluster.nodes.flatMap((node) => {
      const a = last?.nodes.get(node.layout.name);
      const b = now.nodes.get(node.layout.name);
      return a === undefined || b === undefined
        ? [`${node.layout.name}: no snapshot`]
        : podRuleChanges(node.layout.name, a, b, (uid) => now.pods.get(uid)?.metadata.name ?? uid);
    });
    assert.deepEqual(changed, [], 'no pod rules rewritten after the last switch');
  });
});
