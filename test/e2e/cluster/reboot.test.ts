// A node power-cycled without drain, on a two-node cluster of its own: node 1 loses every process
// at once and what a reboot loses (rebootNode in node.ts), then starts again; kubelet re-creates
// every sandbox, many before the agent is Ready. The bar: the mesh audit (audit.ts) of node 1 is
// clean within 60 s of the agent's readiness, nothing deleted or restarted by hand. Run first with
// the chart's default values (sidecar and plain pods), then after `helm upgrade` to profile=ambient
// (ambient and sidecar pods, a fake ztunnel per node that restarts with its node); last, on that
// profile, with the primary CNI's stand-in rewriting its conflist without istio-cni as the node boots,
// then that again with the Istio-owned conflist (istioOwnedCNIConfig=true).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { auditFailures, auditTable, type AuditRow } from '../support/podAudit.ts';
import { collectAudit } from './audit.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { bringUp, DAEMONSET, describeNamespace, type LocalCluster } from './localCluster.ts';
import { rebootNode, type RunningNode } from './node.ts';
import { loadState } from './state.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { tearDown } from './teardown.ts';
import { connectFakeZtunnel } from './ztunnelConnection.ts';
import { upgradeToProfile } from './upgradeProfile.ts';
import {
  conflistTypes,
  mirrorsPrimary,
  netDir,
  OWNED_CONFLIST,
  primaryConflistPath,
  rewritePrimaryConflist,
  runtimeConflist,
} from './primaryCni.ts';
import {
  container,
  isReady,
  NOWHERE,
  probe,
  repairEvents,
  serve,
  validationContainer,
  validationFailed,
  waitFor,
  whenListening,
  type Pod,
  type SandboxFailureEvent,
  createNamespace as createNamespaceAndWait,
} from './workloads.ts';

const IMAGE = SUITE_IMAGE;
const IMAGE_ARCHIVE = SUITE_IMAGE_ARCHIVE;
const NS = 'e2e-reboot';
const AMBIENT_NS = 'e2e-reboot-ambient';
/** The bar: a clean audit this long after the agent is Ready again. */
const CLEAN_WITHIN_MS = 60_000;

describe('a node rebooted without drain', { timeout: 1_200_000 }, () => {
  let cluster: LocalCluster;
  const ztunnels = new Map<string, FakeZtunnel>();
  const api = () => cluster.controlPlane.api;
  const node1 = (): RunningNode => {
    const n = cluster.nodes[0];
    assert.ok(n !== undefined);
    return n;
  };

  const createNamespace = (name: string, labels: Record<string, string> = {}) => createNamespaceAndWait(api(), name, labels);
  const createPod = (
    namespace: string,
    name: string,
    containers: unknown[],
    annotations: Record<string, string> = {},
    initContainers: unknown[] = [],
  ) =>
    api().must('POST', `/api/v1/namespaces/${namespace}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace, annotations },
      spec: { nodeName: node1().layout.name, terminationGracePeriodSeconds: 1, initContainers, containers },
    });
  const sidecarPod = (namespace: string, name: string, validation = false) =>
    createPod(
      namespace,
      name,
      [
        container('istio-proxy', serve(15001, 'proxy-15001'), 1337),
        container('app', whenListening(15001, 'proxy-15001', probe(NOWHERE, 80))),
      ],
      { 'sidecar.istio.io/status': SIDECAR_STATUS },
      validation ? [validationContainer()] : [],
    );
  const pods = async (namespace: string) => (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${namespace}/pods`)).items;
  const waitAllReady = (namespace: string, timeoutMs = 180_000) =>
    waitFor(
      `every pod of ${namespace} Ready`,
      async () => ((await pods(namespace)).every(isReady) ? true : undefined),
      timeoutMs,
      () => describeNamespace(cluster.controlPlane, namespace),
    );
  const agentOnNode1 = async () =>
    (
      await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)
    ).items.find((p) => p.spec.nodeName === node1().layout.name && p.metadata.deletionTimestamp === undefined);
  const connectZtunnel = async (node: RunningNode): Promise<FakeZtunnel> => {
    const zt = await connectFakeZtunnel(cluster.controlPlane, node);
    ztunnels.set(node.layout.name, zt);
    return zt;
  };
  /** `helm upgrade` to profile=ambient (with `values`), then each node's fake ztunnel connected to its new agent and served its snapshot. */
  const upgradeWithZtunnels = async (values: readonly string[] = []) => {
    await upgradeToProfile(cluster, 'ambient', values);
    for (const node of cluster.nodes) {
      ztunnels.get(node.layout.name)?.close();
      const zt = await connectZtunnel(node);
      await zt.waitFor(() => zt.snapshots[0] === 1, `${node.layout.name}: the first snapshot`, 30_000);
    }
  };
  const audit = (namespaces: readonly string[], ambientEnabled: boolean): Promise<AuditRow[]> =>
    collectAudit({ api: api(), node: node1(), namespaces, ambientEnabled, ztunnel: ztunnels.get(node1().layout.name) });

  /**
   * Reboots node 1 and polls the audit until clean; reports sandbox failures, the time to a clean
   * audit after the agent's readiness, and the pods the agent's start-up reconciliation handled.
   * `primaryRewrites`: the primary CNI's stand-in rewrites its conflist without istio-cni as the node
   * boots (before kubelet starts) and again as the agent's container starts, as a primary CNI's
   * agent does on its own start; the pods whose validation then failed and the repairs are reported.
   * 'changed': each rewrite also changes a setting of the file (for the Istio-owned conflist to follow).
   */
  const rebootAndAudit = async (
    t: TestContext,
    namespaces: readonly string[],
    ambient: boolean,
    primaryRewrites: false | 'same' | 'changed' = false,
  ) => {
    const before = await audit(namespaces, ambient);
    t.diagnostic(`before the reboot:\n${auditTable(before)}`);
    assert.deepEqual(auditFailures(before), [], 'the audit is clean before the reboot');
    const podsBefore = new Map<string, Pod>();
    for (const ns of namespaces) for (const p of await pods(ns)) podsBefore.set(p.metadata.uid, p);

    const rebootedAt = Date.now();
    const old = ztunnels.get(node1().layout.name);
    old?.close(); // ztunnel goes with its node and forgets every pod
    ztunnels.delete(node1().layout.name);
    const state = loadState();
    assert.ok(state !== undefined);
    const rewrites: string[] = [];
    const rewrite = (when: string) => {
      rewritePrimaryConflist(node1(), primaryRewrites === 'changed' ? Date.now() : undefined);
      rewrites.push(`${when} ${((Date.now() - rebootedAt) / 1000).toFixed(1)} s after the reboot`);
    };
    cluster.nodes[0] = await rebootNode(state, node1(), cluster.controlPlane, {
      ...(primaryRewrites ? { beforeKubelet: () => rewrite('before kubelet') } : {}),
    });
    const aroundAgentStart = primaryRewrites
      ? waitFor(
          'the agent container starting on node 1',
          async () =>
            (await node1()
              .crictl(['ps', '-a', '--name', 'install-cni', '-q'])
              .then(
                (out) => out.trim(),
                () => '',
              )) === ''
              ? undefined
              : true,
          240_000,
        ).then(() => rewrite('as the agent container started'))
      : Promise.resolve();

    const agentPodName = (await agentOnNode1())?.metadata.name ?? '';
    const readyAt = await waitFor(
      `${DAEMONSET} on node 1 Ready after the reboot`,
      async () => {
        const agent = await agentOnNode1();
        const cond = agent?.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True');
        const at = Date.parse(cond?.lastTransitionTime ?? '');
        // The API's seconds: the condition must have turned true after the reboot.
        return agent !== undefined && !Number.isNaN(at) && at >= Math.floor(rebootedAt / 1000) * 1000 ? Date.now() : undefined;
      },
      240_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
    await aroundAgentStart;
    if (ambient) await connectZtunnel(node1());

    let last: AuditRow[] = [];
    let cleanAt: number | undefined;
    let polls = 0;
    let firstFailures: number | undefined;
    const deadline = readyAt + CLEAN_WITHIN_MS;
    while (Date.now() <= deadline) {
      last = await audit(namespaces, ambient);
      polls++;
      firstFailures ??= auditFailures(last).length + Math.max(0, podsBefore.size - last.length);
      if (last.length === podsBefore.size && auditFailures(last).length === 0) {
        cleanAt = Date.now();
        break;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
    const events = (
      await Promise.all(
        namespaces.map((ns) =>
          api().must<{ items: (SandboxFailureEvent & { message?: string; lastTimestamp?: string | null })[] }>(
            'GET',
            `/api/v1/namespaces/${ns}/events?fieldSelector=${encodeURIComponent('reason=FailedCreatePodSandBox')}`,
          ),
        ),
      )
    ).flatMap((e) => e.items.filter((i) => Date.parse(i.lastTimestamp ?? i.eventTime ?? '') >= Math.floor(rebootedAt / 1000) * 1000));
    const failedSandboxes = events.reduce((n, e) => n + (e.count ?? 1), 0);
    const agentLog = (await api().request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${agentPodName}/log?container=install-cni`))
      .text;
    const handled = agentActions(
      agentLog,
      [...podsBefore.values()].map((p) => p.metadata.name),
    );
    const startup = agentLog.split('\n').find((l) => l.includes('found network namespaces of enrolled pods')) ?? '(no start-up line)';
    const podsAfter = (await Promise.all(namespaces.map((ns) => pods(ns)))).flat();
    const repaired = await Promise.all(namespaces.map((ns) => repairEvents(api(), ns, rebootedAt)));
    if (primaryRewrites)
      t.diagnostic(
        `primary conflist rewritten without istio-cni ${rewrites.join(', ')}; ${primaryConflistPath(node1())} now ${conflistTypes(primaryConflistPath(node1())).join(', ')}; ` +
          `${podsAfter.filter(validationFailed).length} pod(s) with istio-validation exit 126 (${podsAfter
            .filter(validationFailed)
            .map((p) => p.metadata.name)
            .join(', ')}), ` +
          `${repaired.reduce((n, r) => n + r.count, 0)} repair event(s) (${[...new Set(repaired.flatMap((r) => r.reasons))].join(', ')})`,
      );
    t.diagnostic(
      `${podsBefore.size} pods on node 1; agent Ready ${((readyAt - rebootedAt) / 1000).toFixed(1)} s after the reboot; ` +
        `${failedSandboxes} failed sandbox attempt(s) (FailedCreatePodSandBox${events.length ? `: ${[...new Set(events.map((e) => e.involvedObject?.name))].join(', ')}` : ''}); ` +
        `audit ${cleanAt === undefined ? `NOT clean ${CLEAN_WITHIN_MS / 1000} s after` : `clean ${((cleanAt - readyAt) / 1000).toFixed(1)} s after`} the agent's readiness; ` +
        `${polls} audit(s), the first after readiness failing ${firstFailures ?? '?'} pod(s)`,
    );
    t.diagnostic(`the agent's start-up reconciliation: ${startup}`);
    t.diagnostic(`what the agent did per pod after the reboot:\n${handled}`);
    t.diagnostic(`after the reboot:\n${auditTable(last)}`);
    for (const e of events.slice(0, 5)) t.diagnostic(`FailedCreatePodSandBox ${e.involvedObject?.name}: ${e.message?.slice(0, 300)}`);
    assert.ok(
      cleanAt !== undefined,
      `the audit of node 1 is clean within ${CLEAN_WITHIN_MS / 1000} s of the agent's readiness:\n${auditTable(last)}`,
    );
    // No pod was deleted or replaced by hand: the same pods (uids) are there.
    const after = new Set<string>();
    for (const ns of namespaces) for (const p of await pods(ns)) after.add(p.metadata.uid);
    assert.deepEqual([...after].sort(), [...podsBefore.keys()].sort(), 'the same pods, none deleted or re-created');
  };

  before(async () => {
    cluster = await bringUp({ nodes: 2, image: IMAGE, imageTar: IMAGE_ARCHIVE });
    await createNamespace(NS);
  });

  after(async () => {
    for (const zt of ztunnels.values()) zt.close();
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('default profile: sidecar and plain pods on node 1 are captured as before within 60 s of the agent being Ready', {
    timeout: 480_000,
  }, async (t) => {
    for (const i of [1, 2, 3]) await sidecarPod(NS, `sidecar-${i}`);
    for (const i of [1, 2]) await createPod(NS, `plain-${i}`, [container('app', serve(8080, 'plain-8080'))]);
    await waitAllReady(NS);
    await rebootAndAudit(t, [NS], false);
  });

  it('profile=ambient: ambient and sidecar pods on node 1 end enrolled and captured, none left annotated without rules, with a fresh ztunnel', {
    timeout: 600_000,
  }, async (t) => {
    await upgradeWithZtunnels();
    await createNamespace(AMBIENT_NS, { 'istio.io/dataplane-mode': 'ambient' });
    for (const i of [1, 2, 3]) await createPod(AMBIENT_NS, `ambient-${i}`, [container('app', 'sleep 86400')]);
    await waitAllReady(AMBIENT_NS);
    await waitFor(
      'every ambient pod annotated',
      async () =>
        (await pods(AMBIENT_NS)).every((p) => p.metadata.annotations?.['ambient.istio.io/redirection'] === 'enabled') ? true : undefined,
      60_000,
    );
    await rebootAndAudit(t, [NS, AMBIENT_NS], true);
  });

  it('profile=ambient, a primary CNI rewriting its conflist without istio-cni as the node boots: every pod ends captured or enrolled within 60 s of the agent being Ready', {
    timeout: 600_000,
    // Whichever comes first after the reboot, the agent or the sandboxes: when the agent is Ready
    // before kubelet re-creates the ambient pods' sandboxes, their ADDs run in the rewrite's window
    // without istio-cni, the start-up reconciliation finds no netns, and the pods still carry the
    // annotation from before; the status update of the new sandbox (or the verifier) finds each
    // netns by the pod's IPs and enrols it (docs/architecture.md "Reboot without drain").
  }, async (t) => {
    // Sidecar pods as istiod injects them with the CNI: with istio-validation, which is how a
    // sandbox set up without istio-cni is noticed (the repair controller acts on its exit 126).
    await api().must('DELETE', `/api/v1/namespaces/${NS}/pods`);
    await waitFor('the earlier pods gone', async () => ((await pods(NS)).length === 0 ? true : undefined), 120_000);
    for (const i of [1, 2, 3]) await sidecarPod(NS, `validated-${i}`, true);
    await createPod(NS, 'plain-rewrite', [container('app', serve(8080, 'plain-8080'))]);
    await waitAllReady(NS);
    await rebootAndAudit(t, [NS, AMBIENT_NS], true, 'same');
    assert.ok(conflistTypes(primaryConflistPath(node1())).includes('istio-cni'), 'istio-cni chained again');
  });

  it('profile=ambient with the Istio-owned conflist, the primary rewriting its conflist (a setting changed) as the node boots: the owned file stays first and follows it; every pod ends captured or enrolled within 60 s of the agent being Ready', {
    timeout: 600_000,
  }, async (t) => {
    await upgradeWithZtunnels(['istioOwnedCNIConfig=true']);
    const ownedPath = join(netDir(node1()), OWNED_CONFLIST);
    await waitFor(
      `${OWNED_CONFLIST} in place, mirroring the primary`,
      async () => (runtimeConflist(node1()) === ownedPath && mirrorsPrimary(ownedPath, node1()) ? true : undefined),
      60_000,
    );
    await rebootAndAudit(t, [NS, AMBIENT_NS], true, 'changed');
    assert.equal(runtimeConflist(node1()), ownedPath, 'the owned conflist is still the one the runtime picks');
    await waitFor(
      `${OWNED_CONFLIST} mirroring the rewritten primary`,
      async () => (mirrorsPrimary(ownedPath, node1()) ? true : undefined),
      10_000,
    );
    assert.deepEqual(
      conflistTypes(primaryConflistPath(node1())),
      ['bridge', 'portmap'],
      "the primary's file is left as its owner wrote it",
    );
  });
});

/** Per pod, the distinct messages of the agent's JSON log lines naming it (its `pod` field), with their component. */
function agentActions(log: string, names: readonly string[]): string {
  const byPod = new Map<string, Set<string>>();
  for (const line of log.split('\n')) {
    let entry: { msg?: unknown; pod?: unknown; component?: unknown; level?: unknown };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      continue;
    }
    if (typeof entry.pod !== 'string' || typeof entry.msg !== 'string' || entry.level === 'debug') continue;
    const name = entry.pod.split('/')[1] ?? '';
    if (!names.includes(name)) continue;
    const what = typeof entry.component === 'string' ? `${entry.msg} (${entry.component})` : entry.msg;
    byPod.set(name, (byPod.get(name) ?? new Set()).add(what));
  }
  return names.map((n) => `  ${n}: ${[...(byPod.get(n) ?? [])].join('; ') || 'nothing logged'}`).join('\n');
}
