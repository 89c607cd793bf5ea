/**
 * A pod netns no process holds (root, real kernel): CRI-O with `drop_infra_ctr` (its default) runs
 * no pause process, so until the app container starts a pod's network namespace is only a bind
 * mount under the runtime's netns directory. Here each such pod netns is a file of a scratch netns
 * directory (`HOST_NETNS_DIR`) mounted by `unshare --net=<file>`, whose process then exits. The
 * agent must find it by the pod's IPs there (the procfs scans see nothing), for a sidecar pod's
 * repair in place, ADD and verification across a restart, and for an ambient pod's ADD, the
 * start-up reconciliation of enrolled pods after a daemon restart, and verification; and an app
 * process arriving later in the same netns must change nothing.
 */
import { AMBIENT_BACKENDS, ambientSuite } from '../support/ambientSuite.ts';
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomInt, randomUUID } from 'node:crypto';
import { statSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { assertNoDuplicateRules, freshSnapshot, waitUntil } from '../support/ambientConvergence.ts';
import { ambientPodObject, type AmbientNode, type PodSandbox } from '../support/ambientNode.ts';
import { probeSetEntries } from '../support/ambientNodeState.ts';
import { attachmentOf, type AmbientRig } from '../support/ambientRig.ts';
import { brokenPod, crashLooping } from '../support/brokenPod.ts';
import { morePasses } from '../support/daemonMetrics.ts';
import type { FakeZtunnel } from '../support/fakeZtunnel.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { namespaceObject, sidecarPod } from '../support/meshPods.ts';
import { createScratchNetnsDir, type ScratchNetnsDir } from '../support/netnsDir.ts';
import { ANY_ISTIO_STATE, CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import { startAgentRig, type AgentRig } from '../support/startAgentRig.ts';

const REDIRECTION = 'ambient.istio.io/redirection';

function processesIn(netnsPath: string): number[] {
  const inode = statSync(netnsPath).ino;
  return execFileSync('ps', ['-e', '-o', 'pid='], { encoding: 'utf8' })
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((pid) => {
      try {
        return pid > 0 && statSync(`/proc/${pid}/ns/net`).ino === inode;
      } catch {
        return false;
      }
    });
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

describe('sidecar pod whose netns no process holds', { skip: kernelSkip, timeout: 180_000 }, () => {
  let dir: ScratchNetnsDir;
  let rig: AgentRig;

  before(async () => {
    dir = createScratchNetnsDir();
    rig = await startAgentRig({
      REPAIR_ENABLED: 'true',
      REPAIR_REPAIR_PODS: 'true',
      HOST_PROC_DIR: '/proc',
      HOST_NETNS_DIR: dir.path,
      VERIFY_INTERVAL: '1s',
      FORCE_IPTABLES_BINARY: 'nft',
    });
    rig.api.upsertNamespace(namespaceObject('default'));
  });
  after(async () => {
    await rig?.close();
    dir?.remove();
  });

  it('repair in place finds it in the netns directory by the pod IP', async () => {
    // A node-wide unique address, so no other test's pod netns can match.
    const podIp = `10.97.${randomInt(0, 256)}.${randomInt(1, 255)}`;
    const netns = dir.add(randomUUID(), `${podIp}/32`);
    assert.deepEqual(processesIn(netns.path), [], 'no process in the pod netns');
    const name = `broken-${podIp.replaceAll('.', '-')}`;
    rig.api.upsertPod(brokenPod(name, podIp, crashLooping));
    const repaired = await rig.daemon.waitForLog(
      (e) => e.pod === `default/${name}` && typeof e.msg === 'string' && e.msg.startsWith('pod repaired'),
      30_000,
    );
    assert.ok(String(repaired.netns).startsWith(`${netns.path} (inode ${statSync(netns.path).ino},`), JSON.stringify(repaired));
    assert.match(await netnsRuleset(netns.path), CAPTURE_CHAIN);
  });

  it('ADD, then drift repaired after a daemon restart, then an app process arriving changes nothing', async () => {
    const address = `10.98.${randomInt(0, 256)}.2/24`;
    const netns = dir.add(randomUUID(), address);
    const pod = sidecarPod('default', 'web-no-process');
    rig.api.upsertPod(pod);
    const add = await rig.exec('ADD', pod, { netns: netns.path, containerId: 'c-web-no-process', address });
    assert.equal(add.code, 0, `ADD: ${add.stdout}${add.stderr}`);
    const programmed = await netnsRuleset(netns.path);
    assert.match(programmed, CAPTURE_CHAIN);

    await rig.daemon.stop();
    await rig.restartDaemon();
    execFileSync('nsenter', [`--net=${netns.path}`, '--', 'iptables-nft', '-t', 'nat', '-F']);
    assert.notEqual(await netnsRuleset(netns.path), programmed, 'drift injected');
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/web-no-process', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    assert.equal(await netnsRuleset(netns.path), programmed, 'back to what ADD programmed');

    const app = spawn('nsenter', [`--net=${netns.path}`, '--', 'sleep', '86400'], { stdio: 'ignore' });
    try {
      await waitUntil('the app process in the pod netns', () => processesIn(netns.path).length === 1);
      const again = await rig.exec('ADD', pod, { netns: netns.path, containerId: 'c-web-no-process', address });
      assert.equal(again.code, 0, `repeated ADD: ${again.stdout}${again.stderr}`);
      await morePasses(rig.daemon, 2);
      assert.equal(await netnsRuleset(netns.path), programmed, 'the same rules, none twice');
      const drifts = rig.daemon.entries.filter((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/web-no-process');
      assert.equal(drifts.length, 1, 'no drift once a process is in the netns');
    } finally {
      await kill(app);
    }
  });
});

const NS = 'amb-no-process';
const backends = AMBIENT_BACKENDS;

for (const backend of backends)
  describe(`ambient pod whose netns no process holds [${backend.name}]`, { skip: kernelSkip, timeout: 240_000 }, () => {
    let dir: ScratchNetnsDir;
    let node: AmbientNode;
    let rig: AmbientRig;
    let ztunnel: FakeZtunnel;
    const pods = new Map<string, PodSandbox>();

    before(() => {
      dir = createScratchNetnsDir();
    });
    const suite = ambientSuite(NS, backend, pods, { daemonEnv: () => ({ HOST_NETNS_DIR: dir.path, VERIFY_INTERVAL: '1s' }) });
    before(() => ({ node, rig, ztunnel } = suite()));
    after(() => dir?.remove());

    const annotation = (s: PodSandbox) => rig.api.getPod(NS, s.name)?.metadata.annotations?.[REDIRECTION];
    const newPod = async (index: number, annotations: Record<string, string> = {}): Promise<PodSandbox> => {
      const s = await node.addPod(NS, `app-${index}`, index, { netnsDir: dir });
      assert.deepEqual(processesIn(s.netns.path), [], 'no process in the pod netns');
      pods.set(s.uid, s);
      const object = ambientPodObject(s);
      object.metadata.annotations = annotations;
      rig.api.upsertPod(object);
      return s;
    };
    const state = async () =>
      [
        `pods: ${[...pods.values()].map((p) => `${p.name}=${p.uid}:${annotation(p)}`).join(' ')}`,
        `probe set: ${JSON.stringify(await probeSetEntries(node.netns.path, backend.sets))}`,
        `ztunnel known: ${[...ztunnel.known].sort().join(' ')}`,
        `daemon: ${rig.daemon.lines.slice(-30).join('\n')}`,
      ].join('\n');
    const enrolled = async (s: PodSandbox) =>
      annotation(s) === 'enabled' &&
      ztunnel.known.has(s.uid) &&
      (await probeSetEntries(node.netns.path, backend.sets)).some((e) => e.uid === s.uid && e.ip === s.ip) &&
      ANY_ISTIO_STATE.test(await netnsRuleset(s.netns.path));
    /** SIGKILL, as a crash or an OOM kill: nothing is cleaned up, the successor starts from what is on the node. */
    const restart = async () => {
      await rig.daemon.stop('SIGKILL');
      await ztunnel.waitFor(() => !ztunnel.connected, 'ztunnel noticing the agent is gone');
      await rig.startDaemon();
      return rig.daemon.waitForLog((e) => e.msg === 'found network namespaces of enrolled pods');
    };

    it('ADD through the plugin enrols it: rules, probe set, ztunnel given that netns', async () => {
      const s = await newPod(0);
      const res = await rig.exec('ADD', rig.api.getPod(NS, s.name)!, attachmentOf(s));
      assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
      await waitUntil('the pod enrolled', () => enrolled(s), state);
      assert.equal(ztunnel.adds.find((a) => a.uid === s.uid)?.inode, s.inode);
    });

    it('after a daemon restart the start-up reconciliation finds it, and an enrolled pod no ADD of this agent reached', async () => {
      // Enrolled by the agent before this one (annotated), its netns created while the agent was down.
      await rig.daemon.stop('SIGKILL');
      await ztunnel.waitFor(() => !ztunnel.connected, 'ztunnel noticing the agent is gone');
      const earlier = await newPod(1, { [REDIRECTION]: 'enabled' });
      await rig.startDaemon();
      const found = await rig.daemon.waitForLog((e) => e.msg === 'found network namespaces of enrolled pods');
      assert.equal(found.enrolled, 2, JSON.stringify(found));
      assert.equal(found.found, 2, `both netns found with no process in them\n${await state()}`);
      const snap = await freshSnapshot(ztunnel);
      assert.deepEqual(snap.keeps, []);
      assert.deepEqual(
        snap.adds.map((a) => [a.uid, a.inode]).sort(),
        [...pods.values()].map((p) => [p.uid, p.inode]).sort(),
        'each pod handed over with its own netns',
      );
      // Its in-pod rules were never written: verification finds them missing and writes them.
      await waitUntil('the earlier pod fully enrolled', () => enrolled(earlier), state);
      assert.deepEqual(ztunnel.fdProblems, []);
    });

    it('drift in it is repaired by verification', async () => {
      const s = [...pods.values()][0] as PodSandbox;
      const programmed = await netnsRuleset(s.netns.path);
      const flush = backend.name === 'iptables' ? ['iptables-nft', '-t', 'mangle', '-F'] : ['nft', 'flush', 'ruleset'];
      execFileSync('nsenter', [`--net=${s.netns.path}`, '--', ...flush]);
      assert.notEqual(await netnsRuleset(s.netns.path), programmed, 'drift injected');
      const line = await rig.daemon.waitForLog(
        (e) => e.msg === 'pod drifted from its plan' && e.pod === `${NS}/${s.name}` && e.action === 'repaired',
        30_000,
      );
      assert.match(JSON.stringify(line.drift), /rules_missing|rules_changed/);
      assert.equal(await netnsRuleset(s.netns.path), programmed, 'back to the plan');
    });

    it('an app process arriving later changes nothing: same netns, no rule twice, across another restart', async () => {
      const before = new Map(await Promise.all([...pods.values()].map(async (p) => [p.uid, await netnsRuleset(p.netns.path)] as const)));
      const probeSet = await probeSetEntries(node.netns.path, backend.sets);
      for (const p of pods.values()) await p.startProcess();
      const found = await restart();
      assert.equal(found.found, pods.size, JSON.stringify(found));
      const snap = await freshSnapshot(ztunnel);
      assert.deepEqual(
        snap.adds.map((a) => [a.uid, a.inode]).sort(),
        [...pods.values()].map((p) => [p.uid, p.inode]).sort(),
        'the same netns identity through the process as through the directory',
      );
      await morePasses(async () => (await rig.get('metrics', '/metrics')).body, 2);
      for (const p of pods.values()) assert.equal(await netnsRuleset(p.netns.path), before.get(p.uid), `${p.name}: rules unchanged`);
      assert.deepEqual(await probeSetEntries(node.netns.path, backend.sets), probeSet);
      await assertNoDuplicateRules(pods.values(), node.netns.path, backend.name);
      assert.deepEqual(ztunnel.fdProblems, []);
    });
  });
