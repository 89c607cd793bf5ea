// Node-agent lifecycle events on a two-node cluster of its own (chart defaults), each ending in a
// clean mesh audit (audit.ts) of node 1 with every pod Running: 1 the plugin's kubeconfig carrying a
// token the API rejects, with the agent up and while it is down; 2 the agent down for about 60 s
// while sidecar pods arrive (degraded mode); 3 the primary CNI rewriting its conflist without
// `istio-cni` 20 times while a sidecar pod arrives every second; 4 the outage of 2 on profile=ambient
// (a fake ztunnel per node), ambient pods arriving too; 5 the rewrites of 3 on profile=ambient with
// the Istio-owned conflist (istioOwnedCNIConfig=true), each changing a setting of the primary's file.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { auditFailures, auditTable } from '../support/podAudit.ts';
import { collectAudit } from './audit.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { bringUp, DAEMONSET, describeNamespace, type LocalCluster } from './localCluster.ts';
import { nodePrivateDir, type RunningNode } from './node.ts';
import {
  conflistTypes,
  mirrorsPrimary,
  netDir,
  OWNED_CONFLIST,
  primaryConflistPath,
  rewritePrimaryConflist,
  runtimeConflist,
} from './primaryCni.ts';
import { loadState } from './state.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { tearDown } from './teardown.ts';
import { connectFakeZtunnel } from './ztunnelConnection.ts';
import { upgradeToProfile } from './upgradeProfile.ts';
import {
  container,
  isReady,
  NOWHERE,
  probeOnce,
  repairEvents,
  serve,
  summarizeUpgradeFailures,
  validationContainer,
  waitFor,
  whenListening,
  type Pod,
  type SandboxFailureEvent,
} from './workloads.ts';

const IMAGE = SUITE_IMAGE;
const IMAGE_ARCHIVE = SUITE_IMAGE_ARCHIVE;
const NS = 'e2e-lifecycle';
const AMBIENT_NS = 'e2e-lifecycle-ambient';
const AMBIENT_LABELS = { 'istio.io/dataplane-mode': 'ambient' };
const REJECTED_TOKEN = 'revoked-token-the-api-rejects';
/** The bar for the agent to put its token back into a kubeconfig someone else changed. */
const TOKEN_REWRITE_BAR_MS = 10_000;
const OUTAGE_MS = 60_000;
const REWRITES = 20;
const REWRITE_EVERY_MS = 2_000;

const tokenOf = (kubeconfig: string): string | undefined => /^\s*token:\s*(\S+)\s*$/m.exec(kubeconfig)?.[1];
const percentile = (sorted: readonly number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;

describe('node agent lifecycle events', { timeout: 1_200_000 }, () => {
  let cluster: LocalCluster;
  const api = () => cluster.controlPlane.api;
  const node1 = (): RunningNode => {
    const n = cluster.nodes[0];
    assert.ok(n !== undefined);
    return n;
  };
  const kubeconfigPath = () => join(nodePrivateDir(node1().layout, '/run/istio-cni'), 'istio-cni-kubeconfig');
  const conflistPath = () => primaryConflistPath(node1());
  const sidecarPod = (name: string, validation: boolean) =>
    api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: NS, annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
      spec: {
        nodeName: node1().layout.name,
        terminationGracePeriodSeconds: 1,
        initContainers: validation ? [validationContainer()] : [],
        containers: [
          container('istio-proxy', serve(15001, 'proxy-15001'), 1337),
          container('app', whenListening(15001, 'proxy-15001', probeOnce(NOWHERE, 80))),
        ],
      },
    });
  const pods = async (namespace = NS) => (await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${namespace}/pods`)).items;
  const ztunnels = new Map<string, FakeZtunnel>();
  const connectZtunnel = async (node: RunningNode): Promise<FakeZtunnel> => {
    ztunnels.get(node.layout.name)?.close();
    const zt = await connectFakeZtunnel(cluster.controlPlane, node);
    ztunnels.set(node.layout.name, zt);
    return zt;
  };
  const agentOnNode1 = async () =>
    (
      await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)
    ).items.find((p) => p.spec.nodeName === node1().layout.name && p.metadata.deletionTimestamp === undefined);
  const agentLog = async (pod: string, previous = false) =>
    (
      await api().request(
        'GET',
        `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${pod}/log?container=install-cni${previous ? '&previous=true' : ''}`,
      )
    ).text;
  const linesSince = (log: string, since: number, needle: string) =>
    log.split('\n').filter((l) => {
      if (!l.includes(needle)) return false;
      try {
        const time = (JSON.parse(l) as { time?: unknown; ts?: unknown }).time;
        return typeof time !== 'string' || Date.parse(time) >= since;
      } catch {
        return true;
      }
    });
  const waitAgentReady = (what: string, accept: (p: Pod) => boolean = () => true) =>
    waitFor(
      `${DAEMONSET} on node 1 ${what}`,
      async () => {
        const agent = await agentOnNode1();
        return agent !== undefined && isReady(agent) && accept(agent) ? agent : undefined;
      },
      240_000,
      () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
    );
  const sandboxFailures = async (since: number, namespace = NS) => {
    const events = await api().must<{ items: (SandboxFailureEvent & { message?: string })[] }>(
      'GET',
      `/api/v1/namespaces/${namespace}/events?fieldSelector=${encodeURIComponent('reason=FailedCreatePodSandBox')}`,
    );
    return events.items.filter((e) => Date.parse(e.lastTimestamp ?? e.eventTime ?? '') >= Math.floor(since / 1000) * 1000);
  };

  /** Every pod of NS Running and Ready, then the audit of node 1 clean (polled: repairs take a while). */
  const assertEndState = async (t: TestContext, what: string, namespaces: readonly string[] = [NS], ambientEnabled = false) => {
    for (const namespace of namespaces) {
      await waitFor(
        `${what}: every pod of ${namespace} Running and Ready`,
        async () => ((await pods(namespace)).every((p) => p.status?.phase === 'Running' && isReady(p)) ? true : undefined),
        300_000,
        () => describeNamespace(cluster.controlPlane, namespace),
      );
    }
    const audit = () => collectAudit({ api: api(), node: node1(), namespaces, ambientEnabled, ztunnel: ztunnels.get(node1().layout.name) });
    let rows = await audit();
    for (let i = 0; i < 30 && auditFailures(rows).length > 0; i++) {
      await sleep(1000);
      rows = await audit();
    }
    t.diagnostic(`${what}: audit of ${rows.length} pod(s) on node 1, ${auditFailures(rows).length} failing`);
    assert.deepEqual(auditFailures(rows), [], `${what}: the audit of node 1 is clean:\n${auditTable(rows)}`);
    assert.ok(rows.length > 0, 'pods were audited');
  };
  const deleteAllPods = async (namespace = NS) => {
    await api().must('DELETE', `/api/v1/namespaces/${namespace}/pods`);
    await waitFor(
      `the previous scenario pods of ${namespace} gone`,
      async () => ((await pods(namespace)).length === 0 ? true : undefined),
      120_000,
    );
  };
  const ensureNamespace = async (name: string, labels: Record<string, string> = {}) => {
    if ((await api().request('GET', `/api/v1/namespaces/${name}`)).status === 404)
      await api().must('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
    await waitFor(
      `the default service account in ${name}`,
      async () => ((await api().request('GET', `/api/v1/namespaces/${name}/serviceaccounts/default`)).status === 200 ? true : undefined),
      60_000,
    );
  };
  const ambientPod = (name: string) =>
    api().must('POST', `/api/v1/namespaces/${AMBIENT_NS}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: AMBIENT_NS },
      spec: { nodeName: node1().layout.name, terminationGracePeriodSeconds: 1, containers: [container('app', 'sleep 86400')] },
    });
  /**
   * Keeps node 1's agent container down for OUTAGE_MS (every start kubelet makes is killed at once;
   * its back-off grows: 10 s, 20 s, 40 s) while `arrive(i)` runs every 8 s, then deletes the agent
   * pod so the DaemonSet's new one starts without the back-off, and waits for it to be Ready.
   */
  const agentOutage = async (arrive: (i: number) => Promise<void>) => {
    const agent = await agentOnNode1();
    assert.ok(agent !== undefined);
    const startedAt = Date.now();
    let kills = 0;
    let arrivals = 0;
    const killing = (async () => {
      while (Date.now() - startedAt < OUTAGE_MS) {
        const ids = (await node1().crictl(['ps', '--name', 'install-cni', '-q'])).trim().split('\n').filter(Boolean);
        for (const id of ids) {
          await node1().crictl(['stop', '--timeout', '0', id]);
          kills++;
        }
        await sleep(200);
      }
    })();
    const creating = (async () => {
      await sleep(2000);
      while (Date.now() - startedAt < OUTAGE_MS - 5000) {
        await arrive(arrivals++);
        await sleep(8000);
      }
    })();
    await Promise.all([killing, creating]);
    return {
      startedAt,
      kills,
      arrivals,
      end: async () => {
        await api().must('DELETE', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${agent.metadata.name}`);
        return waitAgentReady('replaced and Ready', (p) => p.metadata.name !== agent.metadata.name);
      },
    };
  };

  /**
   * The primary's stand-in rewrites its conflist without istio-cni REWRITES times, one every
   * REWRITE_EVERY_MS, while `arrive(i)` creates pods on node 1 every second. Per rewrite, the time
   * until the agent made it right again, sampled every 10 ms: istio-cni back in the primary's file
   * or, with the Istio-owned conflist, that file mirroring the primary's new content (each rewrite
   * changes a setting); and throughout, the samples where the file the runtime picks lacked istio-cni.
   */
  const primaryRewrites = async (
    t: TestContext,
    o: { owned: boolean; arrive: (i: number) => Promise<unknown>; namespaces?: readonly string[] },
  ) => {
    const namespaces = o.namespaces ?? [NS];
    const ownedPath = join(netDir(node1()), OWNED_CONFLIST);
    const settled = o.owned ? () => mirrorsPrimary(ownedPath, node1()) : () => conflistTypes(conflistPath()).includes('istio-cni');
    const startedAt = Date.now();
    const latencies: number[] = [];
    let missed = 0;
    let done = false;
    let created = 0;
    let samples = 0;
    const runtimeGaps = new Map<string, number>();
    const sampling = (async () => {
      while (!done) {
        const file = runtimeConflist(node1());
        samples++;
        if (file === undefined || !conflistTypes(file).includes('istio-cni')) {
          const name = file?.slice(file.lastIndexOf('/') + 1) ?? '(none)';
          runtimeGaps.set(name, (runtimeGaps.get(name) ?? 0) + 1);
        }
        await sleep(10);
      }
    })();
    const creating = (async () => {
      while (!done) {
        await o.arrive(created++);
        await sleep(1000);
      }
    })();
    try {
      for (let i = 0; i < REWRITES; i++) {
        const at = Date.now();
        rewritePrimaryConflist(node1(), o.owned ? at : undefined);
        const wrote = Date.now();
        let back: number | undefined;
        while (Date.now() - wrote < 10_000) {
          if (settled()) {
            back = Date.now();
            break;
          }
          await sleep(10);
        }
        if (back === undefined) missed++;
        else latencies.push(back - wrote);
        await sleep(Math.max(0, REWRITE_EVERY_MS - (Date.now() - at)));
      }
    } finally {
      done = true;
      await Promise.all([creating, sampling]);
    }
    const ended = Date.now();
    let all: Pod[] = [];
    let failures: SandboxFailureEvent[] = [];
    let repairs = 0;
    const reasons = new Set<string>();
    for (const namespace of namespaces) {
      await waitFor(
        `every pod of ${namespace} Running and Ready`,
        async () => ((await pods(namespace)).every((p) => p.status?.phase === 'Running' && isReady(p)) ? true : undefined),
        300_000,
        () => describeNamespace(cluster.controlPlane, namespace),
      );
      all = [...all, ...(await pods(namespace))];
      failures = [...failures, ...(await sandboxFailures(startedAt, namespace))];
      const repaired = await repairEvents(api(), namespace, startedAt);
      repairs += repaired.count;
      for (const r of repaired.reasons) reasons.add(r);
    }
    const summary = summarizeUpgradeFailures(all, failures, startedAt, ended);
    const sorted = [...latencies].sort((a, b) => a - b);
    const gaps = [...runtimeGaps].map(([f, n]) => `${n} with ${f}`).join(', ') || 'none';
    t.diagnostic(
      `${REWRITES} rewrites every ${REWRITE_EVERY_MS / 1000} s${o.owned ? ' (Istio-owned conflist; each rewrite changes a setting)' : ''}: ` +
        `${o.owned ? `${OWNED_CONFLIST} mirroring the primary again` : 'istio-cni back'} after p50 ${percentile(sorted, 50)} ms, ` +
        `p99 ${percentile(sorted, 99)} ms, max ${sorted.at(-1)} ms (sampled every 10 ms), ${missed} not within 10 s; ` +
        `the runtime's conflist without istio-cni in ${gaps} of ${samples} samples; ` +
        `${created} pods created: ${summary.uncaptured.length} had istio-validation exit 126 in their status` +
        `${summary.uncaptured.length ? ` (${summary.uncaptured.join(', ')})` : ''}, ${summary.sandboxFailures} FailedCreatePodSandBox, ` +
        `${repairs} repair event(s) (${[...reasons].join(', ')})`,
    );
    assert.equal(missed, 0, 'the agent made the chain right again within 10 s of every rewrite');
    assert.equal(all.length, created, 'every pod created is there');
    return { runtimeGaps, summary };
  };

  before(async () => {
    cluster = await bringUp({ nodes: 2, image: IMAGE, imageTar: IMAGE_ARCHIVE });
    await ensureNamespace(NS);
  });

  after(async () => {
    for (const zt of ztunnels.values()) zt.close();
    const state = loadState();
    if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
  });

  it('1 revoked token: the agent rewrites a rejected kubeconfig within 10 s while up, and before it serves again after a restart', {
    timeout: 480_000,
  }, async (t) => {
    const original = readFileSync(kubeconfigPath(), 'utf8');
    const token = tokenOf(original);
    assert.ok(token !== undefined && token.length > 20, 'the installed kubeconfig carries the service-account token');
    const rejected = original.replace(token, REJECTED_TOKEN);
    const agent = await agentOnNode1();
    assert.ok(agent !== undefined);

    // (a) The agent up: the kubeconfig replaced in place by one whose token the API rejects.
    let created = 0;
    const churn = async () => {
      await sidecarPod(`token-${created}`, false);
      created++;
    };
    const upAt = Date.now();
    writeFileSync(kubeconfigPath(), rejected);
    await churn();
    const fixedAt = await waitFor(
      'the agent rewriting the kubeconfig with its token',
      async () => (tokenOf(readFileSync(kubeconfigPath(), 'utf8')) === token ? Date.now() : undefined),
      30_000,
      async () => readFileSync(kubeconfigPath(), 'utf8'),
    );
    const upLatency = fixedAt - upAt;
    await churn();
    // Their sandboxes set up while this agent still serves (the plugin never reads the kubeconfig then).
    await waitFor(
      'the pods created with the agent up Ready',
      async () => ((await pods()).every(isReady) ? true : undefined),
      120_000,
      () => describeNamespace(cluster.controlPlane, NS),
    );
    const failuresWhileUp = (await sandboxFailures(upAt)).length;
    const upLog = await agentLog(agent.metadata.name);
    const rewrites = linesSince(upLog, upAt - 1000, 'wrote kubeconfig').length;

    // (b) The agent down (SIGKILL, kubelet restarts it after its back-off): a rejected kubeconfig
    // must be replaced by the restarted agent's start-up pass, before it reports Ready.
    const restarts = agent.status?.containerStatuses?.find((c) => c.name === 'install-cni')?.restartCount ?? 0;
    const id = (await node1().crictl(['ps', '--name', 'install-cni', '-q'])).trim();
    assert.match(id, /^[0-9a-f]{64}$/, 'one running install-cni container on node 1');
    const downAt = Date.now();
    await node1().crictl(['stop', '--timeout', '0', id]);
    writeFileSync(kubeconfigPath(), rejected);
    await churn();
    let fixedAgain: number | undefined;
    const sampler = setInterval(() => {
      if (fixedAgain === undefined && tokenOf(readFileSync(kubeconfigPath(), 'utf8')) === token) fixedAgain = Date.now();
    }, 50);
    let readySeen: number;
    try {
      await waitAgentReady('restarted by kubelet and Ready', (p) => {
        const now = p.status?.containerStatuses?.find((c) => c.name === 'install-cni')?.restartCount ?? 0;
        return now > restarts;
      });
      readySeen = Date.now();
    } finally {
      clearInterval(sampler);
    }
    await churn();
    const restartedLog = await agentLog(agent.metadata.name);
    const wroteAtStart = linesSince(restartedLog, downAt - 1000, 'wrote kubeconfig').length;
    const failures = await sandboxFailures(upAt);
    t.diagnostic(
      `agent up: kubeconfig with a rejected token rewritten in ${upLatency} ms (${rewrites} 'wrote kubeconfig' line(s)); ` +
        `agent SIGKILLed: rewritten ${fixedAgain === undefined ? 'never (sampled)' : `${fixedAgain - downAt} ms after the kill`}, ` +
        `agent Ready seen ${readySeen - downAt} ms after it (${wroteAtStart} 'wrote kubeconfig' line(s) in the restarted log); ` +
        `${created} sidecar pods, ${failures.reduce((n, e) => n + (e.count ?? 1), 0)} FailedCreatePodSandBox`,
    );
    for (const e of failures.slice(0, 3)) t.diagnostic(`FailedCreatePodSandBox ${e.involvedObject?.name}: ${e.message?.slice(0, 300)}`);
    assert.ok(upLatency <= TOKEN_REWRITE_BAR_MS, `rewritten within ${TOKEN_REWRITE_BAR_MS} ms with the agent up (took ${upLatency})`);
    assert.equal(rewrites, 1, 'the agent logs the rewrite once, not per pod');
    assert.equal(failuresWhileUp, 0, 'no sandbox failed while the agent was up');
    assert.ok(fixedAgain !== undefined && fixedAgain <= readySeen, 'the restarted agent replaced the kubeconfig before it was Ready');
    assert.equal(wroteAtStart, 1, "the restarted agent's log names the rewrite once");
    assert.equal(tokenOf(readFileSync(kubeconfigPath(), 'utf8')), token);
    await assertEndState(t, 'revoked token');
    await deleteAllPods();
  });

  it('2 long agent outage: sidecar pods created while the agent is down for 60 s start through degraded mode; the audit is clean once it is back', {
    timeout: 480_000,
  }, async (t) => {
    const outage = await agentOutage(async (i) => {
      await sidecarPod(`outage-${i}`, false);
    });
    const { startedAt, kills, arrivals: created } = outage;
    // The sidecar pods came up with the agent down: degraded mode.
    await waitFor(
      'every outage pod Running while the agent is still down',
      async () => ((await pods()).every((p) => p.status?.phase === 'Running' && isReady(p)) ? true : undefined),
      60_000,
      () => describeNamespace(cluster.controlPlane, NS),
    );
    const downStill = (await node1().crictl(['ps', '--name', 'install-cni', '-q'])).trim() === '';
    const back = await outage.end();
    const failures = await sandboxFailures(startedAt);
    t.diagnostic(
      `agent down ${((Date.now() - startedAt) / 1000).toFixed(0)} s (${kills} container start(s) killed, ` +
        `still down when the pods were Running: ${downStill}); ${created} sidecar pods created during the outage, ` +
        `${failures.reduce((n, e) => n + (e.count ?? 1), 0)} FailedCreatePodSandBox; new agent ${back.metadata.name} Ready`,
    );
    assert.ok(kills >= 1, 'the agent was down');
    assert.equal(failures.length, 0, 'sidecar pods start through degraded mode, no sandbox fails');
    assert.ok(created >= 5, 'sidecar pods were created during the outage');
    await assertEndState(t, 'long agent outage');
    await deleteAllPods();
  });

  it('3 a primary CNI rewriting its conflist 20 times: istio-cni is put back each time; every sidecar pod ends captured', {
    timeout: 600_000,
  }, async (t) => {
    assert.deepEqual(conflistTypes(conflistPath()), ['bridge', 'portmap', 'istio-cni'], 'chained before');
    await primaryRewrites(t, { owned: false, arrive: (i) => sidecarPod(`rewrite-${i}`, true) });
    assert.deepEqual(conflistTypes(conflistPath()), ['bridge', 'portmap', 'istio-cni'], 'chained at the end');
    await assertEndState(t, 'primary CNI rewrites');
    await deleteAllPods();
  });

  it('4 long agent outage, profile=ambient: ambient pods fail with code 11 and start on kubelet retries once the agent is back; sidecar pods start through degraded mode; the audit is clean', {
    timeout: 600_000,
  }, async (t) => {
    await upgradeToProfile(cluster, 'ambient');
    for (const node of cluster.nodes) await connectZtunnel(node);
    await ensureNamespace(AMBIENT_NS, AMBIENT_LABELS);
    const outage = await agentOutage(async (i) => {
      await sidecarPod(`ambient-outage-sidecar-${i}`, false);
      await ambientPod(`ambient-outage-${i}`);
    });
    await waitFor(
      'every sidecar pod of the outage Running while the agent is still down',
      async () => ((await pods()).every((p) => p.status?.phase === 'Running' && isReady(p)) ? true : undefined),
      60_000,
      () => describeNamespace(cluster.controlPlane, NS),
    );
    const ambientRunningDuring = (await pods(AMBIENT_NS)).filter((p) => p.status?.phase === 'Running').length;
    const backAt = Date.now();
    await outage.end();
    await connectZtunnel(node1());
    await assertEndState(t, 'long agent outage (ambient)', [NS, AMBIENT_NS], true);
    const ambientFailures = await sandboxFailures(outage.startedAt, AMBIENT_NS);
    const sidecarFailures = await sandboxFailures(outage.startedAt);
    const unreachable = ambientFailures.filter((e) => (e.message ?? '').includes('node agent is unreachable')).length;
    t.diagnostic(
      `agent down ${((backAt - outage.startedAt) / 1000).toFixed(0)} s (${outage.kills} start(s) killed); ${outage.arrivals} ambient + ${outage.arrivals} sidecar pods created: ` +
        `${ambientRunningDuring} ambient pod(s) Running during the outage; ambient FailedCreatePodSandBox ${ambientFailures.reduce((n, e) => n + (e.count ?? 1), 0)} ` +
        `(${ambientFailures.length} event object(s), ${unreachable} naming the unreachable agent), sidecar FailedCreatePodSandBox ${sidecarFailures.reduce((n, e) => n + (e.count ?? 1), 0)}; ` +
        `all Running and audited ${((Date.now() - backAt) / 1000).toFixed(0)} s after the agent's return`,
    );
    for (const e of ambientFailures.slice(0, 2))
      t.diagnostic(`FailedCreatePodSandBox ${e.involvedObject?.name}: ${e.message?.slice(0, 400)}`);
    assert.equal(ambientRunningDuring, 0, 'no ambient pod starts while the agent is down (fail closed)');
    assert.ok(ambientFailures.length > 0, 'kubelet retried the ambient sandboxes');
    assert.equal(sidecarFailures.length, 0, 'sidecar pods start through degraded mode');
  });

  it('5 profile=ambient with the Istio-owned conflist: a primary CNI rewriting its own conflist 20 times (a setting changed each time) never displaces the owned file, which follows each rewrite; every pod ends captured or enrolled', {
    timeout: 600_000,
  }, async (t) => {
    await deleteAllPods(NS);
    await ensureNamespace(AMBIENT_NS, AMBIENT_LABELS);
    await deleteAllPods(AMBIENT_NS);
    await upgradeToProfile(cluster, 'ambient', ['istioOwnedCNIConfig=true']);
    for (const node of cluster.nodes) await connectZtunnel(node);
    const ownedPath = join(netDir(node1()), OWNED_CONFLIST);
    await waitFor(
      `${OWNED_CONFLIST} the runtime's conflist, mirroring the primary`,
      async () => (runtimeConflist(node1()) === ownedPath && mirrorsPrimary(ownedPath, node1()) ? true : undefined),
      60_000,
      async () => `${runtimeConflist(node1())}: ${conflistTypes(runtimeConflist(node1()) ?? '').join(', ')}`,
    );
    // The entry the chained-mode agent left through the upgrade goes once the owned file is in place.
    await waitFor(
      `the chained-mode entry removed from ${conflistPath()}`,
      async () => (conflistTypes(conflistPath()).join() === 'bridge,portmap' ? true : undefined),
      30_000,
      async () => conflistTypes(conflistPath()).join(', '),
    );
    const { runtimeGaps } = await primaryRewrites(t, {
      owned: true,
      namespaces: [NS, AMBIENT_NS],
      arrive: (i) => (i % 2 === 0 ? sidecarPod(`owned-${i}`, true) : ambientPod(`owned-${i}`)),
    });
    assert.deepEqual([...runtimeGaps], [], 'the file the runtime picks held istio-cni in every sample');
    assert.equal(runtimeConflist(node1()), ownedPath, 'the owned conflist is still the one the runtime picks');
    assert.deepEqual(conflistTypes(conflistPath()), ['bridge', 'portmap'], "the primary's file is left as its owner wrote it");
    await assertEndState(t, 'primary CNI rewrites, Istio-owned conflist', [NS, AMBIENT_NS], true);
  });
});
