import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { ambientConfigFromOptions } from '@istio-cni/capture';
import {
  type AmbientRuleBackend,
  applyAmbientPodRules,
  type CommandRunner,
  createAmbientHostRules,
  createExecCommandRunner,
  createIpsetProbeSets,
  createNetnsOwnershipCheck,
  createNftProbeSets,
  createPodNetnsGuard,
  createPodNetnsProcFinder,
  createProcFs,
  createScratchNetnsOpener,
  deleteAmbientHostRules,
  deleteAmbientPodRules,
  detectIptablesBackend,
  openNetnsHandle,
  type ProcFs,
  syncProbeSets,
  verifyAmbientHostRules,
  verifyAmbientPodRules,
} from '@istio-cni/dataplane';
import { addNetns } from '../support/netns.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';

const config = ambientConfigFromOptions({ enableIPv6: true, redirectDns: true });
const uidA = '863b91d4-4b68-4efa-917f-4b560e3e86aa';
const uidB = 'aaaabbbb-cccc-dddd-eeee-ffff00001111';

const backends = [{ name: 'iptables-nft', force: 'nft' }, { name: 'iptables-legacy', force: 'legacy' }, { name: 'nft' }] as const;

async function ruleBackend(runner: CommandRunner, b: (typeof backends)[number]): Promise<AmbientRuleBackend> {
  if (!('force' in b)) return { kind: 'nft' };
  return { kind: 'iptables', iptables: await detectIptablesBackend(runner, { forceBinary: b.force }) };
}

/** A process living in `netnsName` until the test ends. */
function sleeperIn(t: TestContext, netnsName: string): ChildProcess {
  const child = spawn('ip', ['netns', 'exec', netnsName, 'sleep', '600'], { stdio: 'ignore' });
  t.after(() => void child.kill('SIGKILL'));
  return child;
}

/** Real procfs, except that `pid` claims a kubepods cgroup of pod `uid` (no real kubelet here). */
function procFsWithFakeCgroup(pid: number, uid: string): ProcFs {
  const real = createProcFs('/proc');
  const cgroup = `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${uid.replaceAll('-', '_')}.slice/cri-containerd-${'ab'.repeat(32)}.scope\n`;
  return {
    ...real,
    // The sandbox may deny access to pid 1; this process's own netns plays the host's.
    stat: (path) => real.stat(path === '1/ns/net' ? 'self/ns/net' : path),
    readFile: (path) => (path === `${pid}/cgroup` ? Promise.resolve(cgroup) : real.readFile(path)),
  };
}

async function waitForNetns(pid: number, inode: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      if (statSync(`/proc/${pid}/ns/net`).ino === inode) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`process ${pid} never entered netns ${inode}`);
}

test('a process in a real pod netns is found by the procfs scan and owns it only by the pod IP', {
  skip: kernelSkip,
  timeout: 60_000,
}, async (t) => {
  const fixture = createPodNetworkFixture(t);
  const podInode = statSync(fixture.pod.path).ino;
  const sleeper = sleeperIn(t, fixture.pod.name);
  const pid = sleeper.pid ?? 0;
  await waitForNetns(pid, podInode);
  const runner = createExecCommandRunner();
  const finder = await createPodNetnsProcFinder({
    procFs: procFsWithFakeCgroup(pid, uidA),
    checkOwnership: createNetnsOwnershipCheck(runner),
  });
  const pod = (ips: string[]) => new Map([[uidA, { uid: uidA, name: 'a', namespace: 'ns', serviceAccount: 'sa', ips }]]);

  const found = await finder.findNetnsForPods(pod([fixture.pod.ipv4]));
  const handle = found.get(uidA)?.netns;
  assert.ok(handle !== undefined, 'pod found');
  t.after(() => handle.close());
  assert.equal(handle.inode, podInode);
  assert.equal(handle.source, `/proc/${pid}/ns/net`);
  // The fd path works for other processes even after the sleeper is gone.
  sleeper.kill('SIGKILL');
  const { stdout } = await handle.use((path) => runner.run(['ip', '-j', 'addr', 'show'], { netns: path }));
  assert.match(stdout, new RegExp(fixture.pod.ipv4.replaceAll('.', '\\.')));

  const sleeper2 = sleeperIn(t, fixture.pod.name);
  await waitForNetns(sleeper2.pid ?? 0, podInode);
  const finder2 = await createPodNetnsProcFinder({
    procFs: procFsWithFakeCgroup(sleeper2.pid ?? 0, uidA),
    checkOwnership: createNetnsOwnershipCheck(runner),
  });
  assert.equal((await finder2.findNetnsForPods(pod(['10.99.0.77']))).size, 0, 'a wrong IP is refused');
  const byV6 = await finder2.findNetnsForPods(pod([fixture.pod.ipv6]));
  for (const f of byV6.values()) f.netns.close();
  assert.equal(byV6.size, 1, 'the IPv6 address also proves ownership');
});

test('the host netns is never handed out even when a host process claims a pod cgroup', { skip: kernelSkip }, async () => {
  const finder = await createPodNetnsProcFinder({ procFs: procFsWithFakeCgroup(process.pid, uidA), checkOwnership: async () => true });
  const found = await finder.findNetnsForPods(
    new Map([[uidA, { uid: uidA, name: 'a', namespace: 'ns', serviceAccount: 'sa', ips: ['127.0.0.1'] }]]),
  );
  assert.equal(found.size, 0);
});

test('a CNI netns path opens to the same inode; a regular file is refused', { skip: kernelSkip }, (t) => {
  const ns = addNetns('amb-cni');
  t.after(() => ns.remove());
  const guard = createPodNetnsGuard({ hostProcDir: '/proc' });
  const handle = guard.openCniNetns(ns.path);
  t.after(() => handle.close());
  assert.equal(handle.inode, statSync(ns.path).ino);
  const file = join(tmpdir(), `not-a-netns-${process.pid}`);
  writeFileSync(file, '');
  t.after(() => rmSync(file, { force: true }));
  assert.throws(() => openNetnsHandle(file), /failed to open netns ".*": not a namespace file/);
  assert.throws(() => guard.openCniNetns('relative/path'), /refusing network namespace "relative\/path": it is not an absolute path/);
});

/** Everything ambient-related in a netns: ISTIO rules/chains, istio nft tables, mark rules, table 100. */
async function ambientState(runner: CommandRunner, netns: string): Promise<string> {
  const parts: string[] = [];
  for (const save of ['iptables-nft-save', 'ip6tables-nft-save', 'iptables-legacy-save', 'ip6tables-legacy-save']) {
    const { stdout } = await runner.run([save], { netns });
    parts.push(...stdout.split('\n').filter((l) => /ISTIO/.test(l)));
  }
  const { stdout: tables } = await runner.run(['nft', 'list', 'tables'], { netns });
  parts.push(...tables.split('\n').filter((l) => l.includes('istio')));
  for (const family of ['-4', '-6']) {
    parts.push((await runner.run(['ip', family, 'rule', 'list', 'fwmark', '0x111/0xfff'], { netns })).stdout.trim());
    parts.push(
      (
        await runner.run(['ip', family, 'route', 'show', 'table', '100', 'type', 'local'], { netns }).catch(() => ({ stdout: '' }))
      ).stdout.trim(),
    );
  }
  return parts.filter((p) => p !== '').join('\n');
}

for (const b of backends) {
  test(`[${b.name}] in-pod rules: apply, verify, re-apply unchanged, delete leaves nothing behind`, {
    skip: kernelSkip,
    timeout: 90_000,
  }, async (t) => {
    const runner = createExecCommandRunner();
    const deps = { runner, openScratchNetns: createScratchNetnsOpener() };
    const backend = await ruleBackend(runner, b);
    const fixture = createPodNetworkFixture(t);
    const handle = openNetnsHandle(fixture.pod.path);
    t.after(() => handle.close());
    assert.equal(await ambientState(runner, fixture.pod.path), '');

    const first = await applyAmbientPodRules(deps, { netns: handle, config, backend });
    assert.deepEqual(first.outcome, backend.kind === 'nft' ? 'applied' : { ipv4: 'applied', ipv6: 'applied' });
    assert.deepEqual(await verifyAmbientPodRules(deps, { netns: handle, config, backend }), []);
    const state = await ambientState(runner, fixture.pod.path);
    assert.match(state, /fwmark 0x111\/0xfff lookup 100/);
    assert.match(state, /local default dev lo/);
    const again = await applyAmbientPodRules(deps, { netns: handle, config, backend });
    assert.deepEqual(again.outcome, backend.kind === 'nft' ? 'unchanged' : { ipv4: 'unchanged', ipv6: 'unchanged' });
    assert.equal(await ambientState(runner, fixture.pod.path), state, 'idempotent');

    // A different plan (ingress mode) is refused without reconcile and replaces the rules with it.
    const ingress = { ingressMode: true, dnsCapture: 'unset', virtualInterfaces: [] } as const;
    await assert.rejects(applyAmbientPodRules(deps, { netns: handle, config, backend, overrides: ingress }), /already holds different/);
    await applyAmbientPodRules(deps, { netns: handle, config, backend, overrides: ingress, reconcile: true });
    assert.deepEqual(await verifyAmbientPodRules(deps, { netns: handle, config, backend, overrides: ingress }), []);

    await deleteAmbientPodRules(deps, { netns: handle, config, backend });
    assert.equal(await ambientState(runner, fixture.pod.path), '');
    assert.notDeepEqual(await verifyAmbientPodRules(deps, { netns: handle, config, backend }), []);
    await deleteAmbientPodRules(deps, { netns: handle, config, backend });
  });
}

for (const kind of ['ipset', 'nft'] as const) {
  test(`[${kind}] probe sets: upsert by UID, removal only for the owning UID, start-up sync, destroy`, {
    skip: kernelSkip,
    timeout: 60_000,
  }, async (t) => {
    const host = addNetns('amb-host');
    t.after(() => host.remove());
    const runner = createExecCommandRunner();
    const options = { runner, config, netns: host.path };
    const sets = kind === 'ipset' ? createIpsetProbeSets(options) : createNftProbeSets(options);
    await sets.create();
    await sets.create();
    assert.deepEqual(await sets.addPod(uidA, ['10.0.0.5', 'fd00::5']), ['10.0.0.5', 'fd00::5']);
    // The IP is reused by pod B before A's removal arrives: B's add overwrites the comment.
    await sets.addPod(uidB, ['10.0.0.5']);
    const byIp = async () => Object.fromEntries((await sets.list()).map((e) => [e.ip, e.uid]));
    assert.deepEqual(await byIp(), { '10.0.0.5': uidB, 'fd00::5': uidA });
    const removal = await sets.removePod(uidA, ['10.0.0.5', 'fd00::5']);
    assert.deepEqual(removal.removed, ['fd00::5']);
    assert.deepEqual(
      removal.keptForOtherPods.map((e) => e.uid),
      [uidB],
    );
    assert.deepEqual(await byIp(), { '10.0.0.5': uidB });

    await sets.addPod('stale-pod', ['10.0.0.99']);
    const sync = await syncProbeSets(sets, [{ uid: uidB, name: 'b', namespace: 'ns', serviceAccount: 'sa', ips: ['10.0.0.5'] }]);
    assert.deepEqual(sync.pruned, ['10.0.0.99']);
    assert.deepEqual(await byIp(), { '10.0.0.5': uidB });

    await sets.flush();
    assert.deepEqual(await sets.list(), []);
    await sets.destroy();
    await sets.destroy();
    const leftovers =
      kind === 'ipset'
        ? (await runner.run(['ipset', 'list', '-n'], { netns: host.path })).stdout
        : (await runner.run(['nft', 'list', 'tables'], { netns: host.path })).stdout;
    assert.equal(leftovers.trim(), '');
  });
}

for (const b of backends) {
  test(`[${b.name}] host probe rules: create, verify, re-create, delete round trip`, { skip: kernelSkip, timeout: 60_000 }, async (t) => {
    const host = addNetns('amb-host');
    t.after(() => host.remove());
    const runner = createExecCommandRunner();
    const deps = { runner, openScratchNetns: createScratchNetnsOpener() };
    const backend = await ruleBackend(runner, b);
    const sets =
      backend.kind === 'nft'
        ? createNftProbeSets({ runner, config, netns: host.path })
        : createIpsetProbeSets({ runner, config, netns: host.path });
    await sets.create();
    await sets.addPod(uidA, ['10.0.0.5']);
    const options = { config, backend, hostNetns: host.path, kubeletUid: 0 };
    await createAmbientHostRules(deps, options);
    assert.deepEqual(await verifyAmbientHostRules(deps, options), []);
    await createAmbientHostRules(deps, options);
    assert.deepEqual(await verifyAmbientHostRules(deps, options), []);
    const state = await ambientState(runner, host.path);
    if (backend.kind === 'iptables') assert.match(state, /-A POSTROUTING -j ISTIO_POSTRT/);
    await deleteAmbientHostRules(deps, options);
    assert.notDeepEqual(await verifyAmbientHostRules(deps, options), []);
    if (backend.kind === 'iptables') assert.equal(await ambientState(runner, host.path), '');
    else assert.doesNotMatch((await runner.run(['nft', 'list', 'ruleset'], { netns: host.path })).stdout, /snat/);
    assert.deepEqual(
      (await sets.list()).map((e) => e.uid),
      [uidA],
      'the probe sets survive a rule delete',
    );
    await sets.destroy();
  });
}
