// Continuous verification through kubelet, on a one-node cluster of its own (profile=ambient, a
// fake ztunnel, verify.interval=5s), once on the iptables backend and once on native nftables: the
// nat table of a running sidecar pod and of an ambient pod is flushed inside the pod's netns. With
// verify.reportOnly=true the drift is held: logged and counted as reported, the rules left flushed,
// `kubectl exec ... install-cni doctor` exits 1 naming both pods, and its `-o json` matches the
// documented schema. Upgraded to verify.reportOnly=false (and restarted), the agent repairs; flushed
// again, both pods are repaired by the verifier (its log line and
// istio_cni_drift_total{action="repaired"}) and doctor exits 0. docs/architecture.md
// ("Verification", "install-cni doctor") states the behaviour.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startFakeZtunnel, type FakeZtunnel } from '../../support/fakeZtunnel.ts';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { doctorSchemaProblems } from '../support/doctorSchema.ts';
import { inPodRules } from '../support/podAudit.ts';
import { podRules } from '../support/pods.ts';
import { runCommand } from '../support/runCommand.ts';
import { type DriftLine, driftLines, runDoctor } from './agentDiagnostics.ts';
import { SIDECAR_STATUS } from './examples.ts';
import { SUITE_IMAGE, SUITE_IMAGE_ARCHIVE } from './layout.ts';
import { bringUp, clusterNode, DAEMONSET, describeNamespace, type LocalCluster } from './localCluster.ts';
import { nodePrivateDir, nodeProcPath, type RunningNode, runningContainerProcPath } from './node.ts';
import { loadState } from './state.ts';
import { tearDown } from './teardown.ts';
import { upgradeWith } from './upgradeProfile.ts';
import { container, isReady, serve, waitFor, type Pod } from './workloads.ts';

const NS = 'e2e-verify';
const AMBIENT_NS = 'e2e-verify-ambient';
const INTERVAL_S = 5;
/** "Within a few intervals", with room for a loaded machine. */
const REPAIR_WAIT_MS = 60_000;
const SIDECAR = 'sidecar-0';
const AMBIENT = 'ambient-0';

/** Each on a cluster of its own: the node's iptables backend (iptables-nft here), then native nftables. */
const BACKENDS = [
  { name: 'iptables', chartSet: [] },
  { name: 'nft', chartSet: ['global.nativeNftables=true'] },
] as const;

for (const backend of BACKENDS)
  describe(`[${backend.name}] continuous verification through kubelet: flushed rules reported, repaired; install-cni doctor`, {
    timeout: 600_000,
  }, () => {
    let cluster: LocalCluster;
    let ztunnel: FakeZtunnel | undefined;
    const api = () => cluster.controlPlane.api;
    const node = (): RunningNode => clusterNode(cluster, 0);

    const agent = async (): Promise<Pod> =>
      waitFor(
        `${DAEMONSET} Ready`,
        async () =>
          (
            await api().must<{ items: Pod[] }>('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods?labelSelector=k8s-app%3D${DAEMONSET}`)
          ).items.find((p) => p.metadata.deletionTimestamp === undefined && isReady(p)),
        180_000,
        () => describeNamespace(cluster.controlPlane, RELEASE_NAMESPACE),
      );
    /** The agent's JSON lines about one pod's drift since `since`. */
    const driftLinesOf = async (pod: string, since: number): Promise<DriftLine[]> =>
      driftLines(api(), (await agent()).metadata.name, pod, since);
    /** A counter's value from the agent's :15014/metrics (on its pod IP), the line with every one of `labels`. */
    const counter = async (name: string, labels: Record<string, string>): Promise<number> => {
      const ip = (await agent()).status?.podIP;
      assert.ok(ip !== undefined, 'the agent pod has an IP');
      const text = await (await fetch(`http://${ip}:15014/metrics`)).text();
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    const driftTotal = (kind: string, action: string) => counter('istio_cni_drift_total', { kind, action });
    /** `install-cni doctor ARGS` in the node's agent. */
    const doctor = (...args: string[]) => runDoctor(cluster.kubeconfig, `ds/${DAEMONSET}`, args);
    /** The netns path of a pod's ready sandbox, through the node's /proc. */
    const netnsOf = async (namespace: string, name: string): Promise<string> => {
      const pod = await api().must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
      const sandboxes = JSON.parse(await node().crictl(['pods', '--state', 'ready', '-o', 'json'])) as {
        items: { id: string; metadata: { uid: string } }[];
      };
      const sandbox = sandboxes.items.find((s) => s.metadata.uid === pod.metadata.uid);
      assert.ok(sandbox !== undefined, `${namespace}/${name} has a ready sandbox`);
      const pid = (JSON.parse(await node().crictl(['inspectp', sandbox.id])) as { info?: { pid?: number } }).info?.pid;
      assert.ok(pid !== undefined && pid > 0, `${namespace}/${name}'s sandbox reports its process`);
      return `${nodeProcPath(node().holder.pid, pid)}/ns/net`;
    };
    /** Whether the pod's netns holds its capture (sidecar or ambient rules), read with both iptables backends and nft. */
    const captured = async (namespace: string, name: string, kind: 'sidecar' | 'ambient') =>
      inPodRules(await podRules(await netnsOf(namespace, name)))[kind];
    /** Runs argv in the pod's netns; resolves with its output whatever its exit status. */
    const inPod = async (namespace: string, name: string, argv: readonly string[], allowFailure = true) =>
      runCommand(['nsenter', `--net=${await netnsOf(namespace, name)}`, '--', ...argv], { allowFailure });
    /** The pod's ISTIO_* nat tables, as `iptables-<flavor>` or an `istio-*-nat` nft table (family and name). */
    const natTables = async (namespace: string, name: string) => {
      const iptables: ('nft' | 'legacy')[] = [];
      for (const flavor of ['nft', 'legacy'] as const) {
        if (/^:ISTIO_/m.test((await inPod(namespace, name, [`iptables-${flavor}-save`])).stdout)) iptables.push(flavor);
      }
      const nft = [
        ...(await inPod(namespace, name, ['nft', 'list', 'tables'])).stdout.matchAll(/^table (\w+) (istio-(?:proxy|ambient)-nat)$/gm),
      ].map((m) => [m[1] ?? '', m[2] ?? ''] as const);
      return { iptables, nft };
    };
    /** How many rules the pod's capture nat tables hold (0 once flushed). */
    const natRules = async (namespace: string, name: string): Promise<number> => {
      const { iptables, nft } = await natTables(namespace, name);
      let rules = 0;
      for (const flavor of iptables) {
        const save = (await inPod(namespace, name, [`iptables-${flavor}-save`])).stdout;
        for (const section of save.split(/^COMMIT$/m)) if (/^\*nat$/m.test(section)) rules += (section.match(/^-A /gm) ?? []).length;
      }
      for (const [family, table] of nft) {
        const listed = (await inPod(namespace, name, ['nft', '-a', 'list', 'table', family, table])).stdout;
        rules += (listed.match(/# handle \d+$/gm) ?? []).length - (listed.match(/^\s*(chain|table) .*# handle \d+$/gm) ?? []).length;
      }
      return rules;
    };
    /**
     * Flushes the capture's nat table in whichever backend holds it (iptables-nft, -legacy, or the nft
     * table). `repairing`: the agent repairs drift, so a look after the flush races the repair (the
     * next pass can come between the flush and the look); the verifier's drift line then shows the flush.
     */
    const flushNat = async (namespace: string, name: string, repairing: boolean) => {
      const { iptables, nft } = await natTables(namespace, name);
      if (backend.name === 'nft') assert.deepEqual(iptables, [], `${namespace}/${name}: no ISTIO_* iptables state on the nft backend`);
      assert.ok(iptables.length + nft.length > 0, `${namespace}/${name}: capture rules found to flush`);
      for (const flavor of iptables) await inPod(namespace, name, [`iptables-${flavor}`, '-t', 'nat', '-F'], false);
      for (const [family, table] of nft) await inPod(namespace, name, ['nft', 'flush', 'table', family, table], false);
      if (!repairing) assert.equal(await natRules(namespace, name), 0, `${namespace}/${name}: nat flushed`);
    };
    const PODS = [
      [NS, SIDECAR],
      [AMBIENT_NS, AMBIENT],
    ] as const;
    /** Flushes both pods' nat tables, then waits for the verifier's first line about each (in PODS order). */
    const flushBothAndWaitForDrift = async (since: number, repairing: boolean): Promise<DriftLine[]> => {
      for (const [namespace, name] of PODS) await flushNat(namespace, name, repairing);
      const first: DriftLine[] = [];
      for (const [namespace, name] of PODS) {
        const lines = await waitFor(
          `the verifier's line about the drift of ${namespace}/${name}`,
          async () => {
            const found = await driftLinesOf(`${namespace}/${name}`, since);
            return found.length > 0 ? found : undefined;
          },
          REPAIR_WAIT_MS,
        );
        assert.ok(lines[0] !== undefined);
        first.push(lines[0]);
      }
      return first;
    };
    const podRunning = (namespace: string, name: string) =>
      waitFor(
        `${namespace}/${name} Ready`,
        async () => {
          const pod = await api().must<Pod>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
          return isReady(pod) ? pod : undefined;
        },
        180_000,
        () => describeNamespace(cluster.controlPlane, namespace),
      );

    before(async () => {
      cluster = await bringUp({
        nodes: 1,
        image: SUITE_IMAGE,
        imageTar: SUITE_IMAGE_ARCHIVE,
        chartSet: ['profile=ambient', `verify.interval=${INTERVAL_S}s`, 'verify.reportOnly=true', ...backend.chartSet],
      });
      const socket = join(nodePrivateDir(node().layout, '/run/ztunnel'), 'ztunnel.sock');
      ztunnel = await waitFor(
        `a ZDS connection to ${socket}`,
        async () => (existsSync(socket) ? startFakeZtunnel({ path: socket }).catch(() => undefined) : undefined),
        120_000,
      );
      await api().must('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
      await api().must('POST', '/api/v1/namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name: AMBIENT_NS, labels: { 'istio.io/dataplane-mode': 'ambient' } },
      });
      for (const namespace of [NS, AMBIENT_NS]) {
        await waitFor(
          `the default service account in ${namespace}`,
          async () =>
            (await api().request('GET', `/api/v1/namespaces/${namespace}/serviceaccounts/default`)).status === 200 ? true : undefined,
          60_000,
        );
      }
      const nodeName = node().layout.name;
      await api().must('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: SIDECAR, namespace: NS, annotations: { 'sidecar.istio.io/status': SIDECAR_STATUS } },
        spec: {
          nodeName,
          terminationGracePeriodSeconds: 1,
          containers: [container('istio-proxy', serve(15001, 'proxy-15001'), 1337), container('app', 'sleep 86400')],
        },
      });
      await api().must('POST', `/api/v1/namespaces/${AMBIENT_NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: AMBIENT, namespace: AMBIENT_NS },
        spec: { nodeName, terminationGracePeriodSeconds: 1, containers: [container('app', 'sleep 86400')] },
      });
      await podRunning(NS, SIDECAR);
      await podRunning(AMBIENT_NS, AMBIENT);
    });

    after(async () => {
      ztunnel?.close();
      const state = loadState();
      if (state !== undefined) assert.deepEqual(await tearDown(state), [], 'the cluster left something behind');
    });

    it('report-only: the flushed pods are reported once, left as they are, and doctor exits 1 naming both; -o json matches the schema', async (t) => {
      assert.ok(await captured(NS, SIDECAR, 'sidecar'), 'the sidecar pod was captured at ADD');
      assert.ok(await captured(AMBIENT_NS, AMBIENT, 'ambient'), 'the ambient pod was enrolled at ADD');
      const clean = await doctor();
      assert.equal(clean.exitCode, 0, `doctor on an undisturbed node exits 0:\n${clean.stdout}${clean.stderr}`);

      const since = Date.now();
      for (const line of await flushBothAndWaitForDrift(since, false)) {
        assert.equal(line.action, 'reported', JSON.stringify(line));
        assert.ok(
          line.drift.some((d) => d.kind === 'rules_missing'),
          `rules_missing in ${JSON.stringify(line)}`,
        );
      }
      assert.ok(
        (await driftTotal('rules_missing', 'reported')) >= 2,
        'istio_cni_drift_total{kind="rules_missing",action="reported"} counts both pods',
      );

      // Held still: two more passes found both pods drifted, repaired nothing and logged nothing new.
      const drifted = await counter('istio_cni_pod_verifications_total', { result: 'drift' });
      await waitFor(
        'two more passes over both drifted pods',
        async () => ((await counter('istio_cni_pod_verifications_total', { result: 'drift' })) >= drifted + 4 ? true : undefined),
        REPAIR_WAIT_MS,
      );
      const text = await doctor();
      assert.equal(text.exitCode, 1, `doctor exits 1 with drift:\n${text.stdout}${text.stderr}`);
      for (const pod of [`${NS}/${SIDECAR}`, `${AMBIENT_NS}/${AMBIENT}`]) {
        assert.match(text.stdout, new RegExp(`^\\s+${pod}\\s+\\w+\\s+drift\\s+rules_missing`, 'm'), `the PODS table shows ${pod} drifted`);
        assert.match(text.stdout, new RegExp(`^\\s+- ${pod}: rules_missing`, 'm'), `PROBLEMS names ${pod}`);
      }
      t.diagnostic(`doctor before repair:\n${text.stdout}`);

      const json = await doctor('-o', 'json');
      assert.equal(json.exitCode, 1);
      const report = JSON.parse(json.stdout) as unknown;
      assert.deepEqual(doctorSchemaProblems(report), [], 'doctor -o json follows the documented schema');
      const r = report as {
        ok: boolean;
        daemon: { verification: unknown; pods: { pod: string; status: string; mode: string }[] };
        problems: string[];
      };
      assert.equal(r.ok, false);
      assert.deepEqual(r.daemon.verification, { intervalSeconds: INTERVAL_S, reportOnly: true });
      const byName = new Map(r.daemon.pods.map((p) => [p.pod, p]));
      assert.deepEqual(
        [byName.get(`${NS}/${SIDECAR}`), byName.get(`${AMBIENT_NS}/${AMBIENT}`)].map((p) => [p?.mode, p?.status]),
        [
          ['sidecar', 'drift'],
          ['ambient', 'drift'],
        ],
      );
      assert.equal(r.problems.filter((p) => p.includes(SIDECAR) || p.includes(AMBIENT)).length, 2);

      for (const [namespace, name] of PODS) {
        assert.equal(
          (await driftLinesOf(`${namespace}/${name}`, since)).length,
          1,
          `${namespace}/${name}: the unchanged drift is logged once`,
        );
      }
      assert.equal(await natRules(NS, SIDECAR), 0, "report-only: the sidecar pod's nat table is still flushed");
      assert.equal(await natRules(AMBIENT_NS, AMBIENT), 0, "report-only: the ambient pod's nat table is still flushed");
    });

    it('repair: with reportOnly off the flushed pods are repaired by the verifier, counted, and doctor exits 0', async (t) => {
      // The settings reach the agent through the ConfigMap, which (as upstream's chart) does not roll the
      // DaemonSet by itself: upgradeWith restarts it, as the operator's `kubectl rollout restart` does.
      await upgradeWith(cluster, ['verify.reportOnly=false']);
      ztunnel?.close();
      const socket = join(nodePrivateDir(node().layout, '/run/ztunnel'), 'ztunnel.sock');
      ztunnel = await waitFor(
        `a ZDS connection to ${socket} after the upgrade`,
        async () => (existsSync(socket) ? startFakeZtunnel({ path: socket }).catch(() => undefined) : undefined),
        120_000,
      );
      // What report-only left flushed is put back (by the new agent's start-up reconciliation or its first pass).
      await waitFor(
        'both pods back in place after the upgrade',
        async () => ((await doctor()).exitCode === 0 ? true : undefined),
        REPAIR_WAIT_MS,
        async () => `install-cni doctor says:\n${(await doctor()).stdout}`,
      );

      const before = await driftTotal('rules_missing', 'repaired');
      for (const line of await flushBothAndWaitForDrift(Date.now(), true)) {
        assert.equal(line.action, 'repaired', JSON.stringify(line));
        assert.match(JSON.stringify(line.drift), /rules_missing/, 'the verifier saw the flush');
      }
      // Counted once each repair is done (the log line is written first).
      await waitFor(
        'istio_cni_drift_total{kind="rules_missing",action="repaired"} up by both pods',
        async () => ((await driftTotal('rules_missing', 'repaired')) >= before + 2 ? true : undefined),
        REPAIR_WAIT_MS,
        async () => `counter ${await driftTotal('rules_missing', 'repaired')}, before the flush ${before}`,
      );
      assert.ok((await natRules(NS, SIDECAR)) > 0, "the sidecar pod's nat rules are back");
      assert.ok((await natRules(AMBIENT_NS, AMBIENT)) > 0, "the ambient pod's nat rules are back");
      const text = await doctor();
      assert.equal(text.exitCode, 0, `doctor exits 0 once repaired:\n${text.stdout}${text.stderr}`);
      const json = JSON.parse((await doctor('-o', 'json')).stdout) as unknown;
      assert.deepEqual(doctorSchemaProblems(json), []);
      assert.equal((json as { ok: boolean }).ok, true);
      assert.deepEqual((json as { daemon: { verification: unknown } }).daemon.verification, {
        intervalSeconds: INTERVAL_S,
        reportOnly: false,
      });
      t.diagnostic(`doctor after repair:\n${text.stdout}`);
    });
    it("the node's host probe rules removed (our chain flushed and its jump deleted, as an operator or a firewall reload does) are put back by the verifier, once", async () => {
      const inNode = async (argv: readonly string[], allowFailure = true) =>
        (await runCommand(['nsenter', `--net=/proc/${node().holder.pid}/ns/net`, '--', ...argv], { allowFailure })).stdout;
      // The node's iptables backend is iptables-nft here (reading the legacy one would create its tables).
      const hostRules = async () =>
        backend.name === 'nft'
          ? await inNode(['nft', 'list', 'table', 'inet', 'istio-ambient-nat'])
          : (await inNode(['iptables-nft-save', '-t', 'nat']))
              .split('\n')
              .filter((l) => /ISTIO_POSTRT/.test(l) && l.startsWith('-A '))
              .join('\n');
      const planned = await hostRules();
      assert.match(planned, backend.name === 'nft' ? /snat/ : /^-A POSTROUTING -j ISTIO_POSTRT$/m, 'host rules in place');
      const before = await driftTotal('host_rules', 'repaired');
      if (backend.name === 'nft') await inNode(['nft', 'flush', 'table', 'inet', 'istio-ambient-nat'], false);
      else {
        await inNode(['iptables-nft', '-t', 'nat', '-D', 'POSTROUTING', '-j', 'ISTIO_POSTRT'], false);
        await inNode(['iptables-nft', '-t', 'nat', '-F', 'ISTIO_POSTRT'], false);
      }
      await waitFor(
        'istio_cni_drift_total{kind="host_rules",action="repaired"} up by one',
        async () => ((await driftTotal('host_rules', 'repaired')) > before ? true : undefined),
        REPAIR_WAIT_MS,
        async () => `counter ${await driftTotal('host_rules', 'repaired')}, before ${before}; host rules now:\n${await hostRules()}`,
      );
      assert.equal(await hostRules(), planned, 'the same host rules, each once');
    });

    it('a hostile tenant: what NET_ADMIN in the sidecar pod allows in its netns (imitations of ours, a forged comment) reaches no log, is repaired, and the neighbour is untouched', async (t) => {
      // Done from the node through nsenter into the pod's netns (the suite image carries no nft):
      // the kernel state is what the tenant's own `nft`/`iptables` would leave.
      const tokenPath = '/var/run/secrets/kubernetes.io/serviceaccount/token';
      // Read through the container's root, where /var/run is an absolute link to /run.
      const token = readFileSync(
        `${await runningContainerProcPath(node(), 'install-cni')}/root/run/secrets/kubernetes.io/serviceaccount/token`,
        'utf8',
      ).trim();
      assert.ok(token.length > 40, "the agent's service account token, the canary");
      // Without save headers (they carry the time) and counters (traffic moves them).
      const rulesOf = async (namespace: string, name: string) =>
        (await podRules(await netnsOf(namespace, name)))
          .replace(/^#.*$/gm, '')
          .replace(/\[\d+:\d+\]/g, '[]')
          .replace(/counter packets \d+ bytes \d+/g, 'counter');
      const neighbour = await rulesOf(AMBIENT_NS, AMBIENT);
      const since = Date.now();
      if (backend.name === 'nft') {
        const dir = mkdtempSync(join(tmpdir(), 'hostile-tenant-'));
        t.after(() => rmSync(dir, { recursive: true, force: true }));
        const file = join(dir, 'tenant.json');
        writeFileSync(
          file,
          JSON.stringify({
            nftables: [
              { add: { table: { family: 'inet', name: `istio-proxy-x;include"${tokenPath}"` } } },
              { delete: { table: { family: 'inet', name: 'istio-proxy-nat' } } },
            ],
          }),
        );
        await inPod(NS, SIDECAR, ['nft', '-j', '-f', file], false);
      } else {
        const [flavor] = (await natTables(NS, SIDECAR)).iptables;
        assert.ok(flavor !== undefined, 'the sidecar pod has ISTIO_* iptables state');
        const xt = `iptables-${flavor}`;
        await inPod(
          NS,
          SIDECAR,
          [xt, '-t', 'nat', '-I', 'OUTPUT', '1', '-m', 'comment', '--comment', 'x\n-A OUTPUT -j ISTIO_OUTPUT', '-j', 'RETURN'],
          false,
        );
        await inPod(NS, SIDECAR, [xt, '-t', 'nat', '-N', 'we"ird'], false);
        await inPod(NS, SIDECAR, [xt, '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT'], false);
      }
      const lines = await waitFor(
        `the verifier's line about ${NS}/${SIDECAR}`,
        async () => {
          const found = await driftLinesOf(`${NS}/${SIDECAR}`, since);
          return found.length > 0 ? found : undefined;
        },
        REPAIR_WAIT_MS,
      );
      assert.equal(lines[0]?.action, 'repaired', JSON.stringify(lines[0]));
      await waitFor('doctor exits 0 after the repair', async () => ((await doctor()).exitCode === 0 ? true : undefined), REPAIR_WAIT_MS);
      assert.ok(await captured(NS, SIDECAR, 'sidecar'), "the tenant's pod is captured again");
      assert.equal(await rulesOf(AMBIENT_NS, AMBIENT), neighbour, 'the neighbour pod is untouched');
      const name = (await agent()).metadata.name;
      const log = (await api().request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods/${name}/log?container=install-cni`)).text;
      assert.ok(!log.includes(token.slice(0, 40)), "the agent's token is nowhere in its log");
      assert.ok(
        !log.includes('"level":"error"'),
        log
          .split('\n')
          .filter((l) => l.includes('"level":"error"'))
          .join('\n'),
      );
      if (backend.name !== 'nft') {
        const save =
          (await inPod(NS, SIDECAR, ['iptables-nft-save', '-t', 'nat'])).stdout +
          (await inPod(NS, SIDECAR, ['iptables-legacy-save', '-t', 'nat'])).stdout;
        assert.equal((save.match(/^-A OUTPUT -j ISTIO_OUTPUT$/gm) ?? []).length, 1, `our jump is back, once:\n${save}`);
        assert.match(save, /^:we"ird/m, "the tenant's chain is left as it was");
      }
    });
  });
