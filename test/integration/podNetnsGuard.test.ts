/**
 * The node's own network namespace is never programmed or enrolled (root, real kernel): CNI ADD
 * through the agent (sidecar and ambient), the plugin's degraded mode with the agent down, and
 * repair in place refuse it — by `/proc/1/ns/net`, a bind mount of it, a path with `..`, the
 * daemon's own netns — with CNI error 8 naming the netns, and the node's iptables-save,
 * nft list ruleset and ipset list are the same before and after (nothing ran). Anything that is
 * not a network namespace is refused alike; a real pod netns still works.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { captureEnvironmentFrom, type Pod } from '@istio-cni/capture';
import {
  createExecCommandRunner,
  createNetnsDir,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
  type NetnsHandle,
  openNetnsHandle,
  listNetnsAddresses,
  PodNetnsRefusedError,
  searchNetnsDir,
} from '@istio-cni/dataplane';
import { createInPlaceRepairer } from '../../packages/install-cni/src/repair/repairPodInPlace.ts';
import { createAmbientNode, type AmbientNode } from '../support/ambientNode.ts';
import { startAmbientRig, type AmbientRig } from '../support/ambientRig.ts';
import { PLUGIN } from '../support/daemonProcess.ts';
import { execPlugin, type ExecResult } from '../support/execPlugin.ts';
import { startFakeKubelet, type FakeKubelet } from '../support/fakeKubelet.ts';
import { AMBIENT_LABEL, namespaceObject, plainPod, sidecarPod } from '../support/meshPods.ts';
import { CAPTURE_CHAIN, netnsRuleset } from '../support/netnsRuleset.ts';
import { addNetns } from '../support/netns.ts';
import { createScratchNetnsDir } from '../support/netnsDir.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';
import { cniEnv, startAgentRig, type AgentRig, type PodAttachment } from '../support/startAgentRig.ts';

const run = promisify(execFile);

/** The netns this test runs in: the node's, for the daemon started next to it. */
const TEST_NETNS = `/proc/${process.pid}/ns/net`;

/** Netfilter (comments and counters aside) and ipsets of a netns: what "no command ran" leaves alone. */
async function netnsState(netns: string): Promise<string> {
  const { stdout } = await run('nsenter', [`--net=${netns}`, '--', 'ipset', 'list']);
  return `${await netnsRuleset(netns)}\n== ipset list\n${stdout}`;
}

/** A file bind-mounted onto `source` (as `ip netns add` makes /var/run/netns/x); unmounted after the test. */
function bindMount(t: TestContext, source: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'netns-alias-'));
  const target = join(dir, 'ns');
  writeFileSync(target, '');
  execFileSync('mount', ['--bind', source, target]);
  t.after(() => {
    execFileSync('umount', ['-l', target], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  });
  return target;
}

/** `/var/run/netns/../../../<path>`: resolves to `path` from any depth of /var/run/netns. */
const viaDotDot = (absolute: string) => `/var/run/netns/../../..${absolute}`;

function cniError(res: ExecResult): { code: number; msg: string } {
  assert.equal(res.code, 1, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
  return JSON.parse(res.stdout) as { code: number; msg: string };
}

function assertRefused(res: ExecResult, netns: string, reason: RegExp): void {
  const err = cniError(res);
  assert.equal(err.code, 8, res.stdout);
  assert.ok(err.msg.startsWith(`refusing network namespace ${JSON.stringify(netns)}`), err.msg);
  assert.match(err.msg, reason);
}

/** Not network namespaces at all; the same refusal, code 8. */
function notNetnsPaths(t: TestContext, daemonPid: number): [string, string, RegExp][] {
  const dir = mkdtempSync(join(tmpdir(), 'not-netns-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'file');
  writeFileSync(file, '');
  mkdirSync(join(dir, 'dir'));
  return [
    ['a regular file', file, /it is not a namespace file/],
    ['a directory', join(dir, 'dir'), /it is not a namespace file/],
    ['a missing path', join(dir, 'missing'), /it cannot be opened: ENOENT/],
    ['a mount namespace', `/proc/${daemonPid}/ns/mnt`, /it is a mnt namespace, not a network namespace/],
  ];
}

const HOST_REASON = /it is the node's own network namespace|it is the network namespace istio-cni|it cannot be opened: EACCES/;

test('the guard for real: node netns by every path, own netns, non-network namespaces; a pod netns opens', { skip: kernelSkip }, (t) => {
  const pod = addNetns('guard-pod');
  const node = addNetns('guard-node');
  t.after(() => {
    pod.remove();
    node.remove();
  });
  // A host procfs root whose pid 1 sits in `node` (HOST_PROC_DIR is configurable).
  const hostProc = mkdtempSync(join(tmpdir(), 'host-proc-'));
  mkdirSync(join(hostProc, '1/ns'), { recursive: true });
  writeFileSync(join(hostProc, '1/ns/net'), '');
  execFileSync('mount', ['--bind', node.path, join(hostProc, '1/ns/net')]);
  t.after(() => {
    execFileSync('umount', ['-l', join(hostProc, '1/ns/net')]);
    rmSync(hostProc, { recursive: true, force: true });
  });
  const guard = createPodNetnsGuard({ hostProcDir: hostProc });

  const handle = guard.openCniNetns(pod.path);
  assert.equal(handle.inode, statSync(pod.path).ino);
  guard.check(handle);
  handle.close();

  const refused = (path: string, reason: RegExp) =>
    assert.throws(
      () => guard.openCniNetns(path),
      (err: unknown) =>
        err instanceof PodNetnsRefusedError &&
        err.message.startsWith(`refusing network namespace ${JSON.stringify(path)}`) &&
        reason.test(err.message),
    );
  const nodeNetns = /it is the node's own network namespace$/;
  refused(node.path, nodeNetns);
  refused(join(hostProc, '1/ns/net'), nodeNetns);
  refused(bindMount(t, node.path), nodeNetns);
  refused(`/var/run/netns/../netns/${node.name}`, nodeNetns);
  refused(viaDotDot(node.path), nodeNetns);
  refused(TEST_NETNS, /it is the network namespace istio-cni itself runs in$/);
  refused(bindMount(t, TEST_NETNS), /it is the network namespace istio-cni itself runs in$/);
  refused('/proc/self/ns/net', /itself runs in$/);
  for (const [, path, reason] of notNetnsPaths(t, process.pid)) refused(path, reason);
  // Bind-mounted, the type comes from the mount (a mount namespace cannot be bind-mounted into itself).
  refused(bindMount(t, `/proc/${process.pid}/ns/uts`), /it is a uts namespace, not a network namespace/);
  refused('relative/netns', /it is not an absolute path/);

  // Handles found by a procfs scan are checked the same way.
  const nodeHandle = openNetnsHandle(node.path);
  t.after(() => nodeHandle.close());
  assert.throws(() => guard.check(nodeHandle), /refusing network namespace ".*guard-node.*": it is the node's own network namespace/);

  // With the real /proc as the host's: our own netns is the node's (or stands in for it).
  const real = createPodNetnsGuard({ hostProcDir: '/proc' });
  assert.throws(
    () => real.openCniNetns('/proc/1/ns/net'),
    (err: unknown) => err instanceof PodNetnsRefusedError && HOST_REASON.test(err.message),
  );
  assert.throws(() => real.openCniNetns(TEST_NETNS), HOST_REASON);
  real.openCniNetns(node.path).close();
});

test('a netns file no process holds (CRI-O drop_infra_ctr): the guard opens it, the directory search takes it and nothing else', {
  skip: kernelSkip,
}, async (t) => {
  const dir = createScratchNetnsDir();
  const node = addNetns('guard-node');
  t.after(() => {
    for (const name of ['decoy-link', 'decoy-file']) rmSync(join(dir.path, name), { force: true });
    dir.remove();
    node.remove();
  });
  const pod = dir.add('0b1f6c1e-5a3e-4c9a-8d4f-1e2a3b4c5d6e', '10.96.254.2/24');
  const guard = createPodNetnsGuard({ hostProcDir: '/proc', hostNetnsPath: node.path });
  const handle = guard.openCniNetns(pod.path);
  assert.equal(handle.inode, statSync(pod.path).ino);
  guard.check(handle);
  handle.close();

  // Beside it, what the directory may also hold, each claiming the pod's IP where it can.
  const decoy = dir.add('decoy-node');
  execFileSync('umount', [decoy.path]);
  execFileSync('mount', ['--bind', node.path, decoy.path]);
  const uts = dir.add('decoy-uts');
  execFileSync('umount', [uts.path]);
  execFileSync('mount', ['--bind', `/proc/${process.pid}/ns/uts`, uts.path]);
  symlinkSync(node.path, join(dir.path, 'decoy-link'));
  writeFileSync(join(dir.path, 'decoy-file'), '');
  execFileSync('ip', ['-n', node.name, 'addr', 'add', '10.96.254.2/32', 'dev', 'lo']);
  refusedBy(guard, uts.path, /it is a uts namespace, not a network namespace/);
  refusedBy(guard, decoy.path, /it is the node's own network namespace/);
  refusedBy(guard, join(dir.path, 'decoy-link'), /it is the node's own network namespace/);
  refusedBy(guard, join(dir.path, 'decoy-file'), /it is not a namespace file/);

  const netnsDir = createNetnsDir(dir.path);
  assert.deepEqual(
    (await netnsDir.list(() => {})).map((e) => e.name).sort(),
    [pod.name, 'decoy-node', 'decoy-uts'].sort(),
    'only nsfs mounts are listed',
  );
  const runner = createExecCommandRunner();
  const found = await searchNetnsDir(
    { dir: netnsDir, listAddresses: (h) => listNetnsAddresses(runner, h) },
    new Map([['pod', ['10.96.254.2']]]),
    new Set([statSync(node.path).ino]),
    () => {},
  );
  assert.deepEqual(
    [...found].map(([k, h]) => [k, h.source, h.inode]),
    [['pod', pod.path, statSync(pod.path).ino]],
  );
  for (const h of found.values()) h.close();
});

function refusedBy(guard: ReturnType<typeof createPodNetnsGuard>, path: string, reason: RegExp): void {
  assert.throws(
    () => guard.openCniNetns(path),
    (err: unknown) => err instanceof PodNetnsRefusedError && reason.test(err.message),
    path,
  );
}

const backends = [
  { name: 'iptables-nft', env: { FORCE_IPTABLES_BINARY: 'nft' } },
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' } },
  { name: 'nft', env: { NATIVE_NFTABLES: 'true' } },
] as const;

/** What each sidecar-path case sends as CNI_NETNS; the daemon (and the plugin) run in the test's netns. */
function hostPaths(t: TestContext, daemonPid: number): [string, string, RegExp][] {
  return [
    ['/proc/1/ns/net', '/proc/1/ns/net', HOST_REASON],
    ['a bind mount of the node netns', bindMount(t, TEST_NETNS), HOST_REASON],
    ['a ".." path to the node netns', viaDotDot(TEST_NETNS), HOST_REASON],
    ["the daemon's own netns", `/proc/${daemonPid}/ns/net`, HOST_REASON],
  ];
}

for (const backend of backends)
  describe(`sidecar ADD into the node netns is refused: agent, then degraded mode [${backend.name}]`, {
    skip: kernelSkip,
    timeout: 240_000,
  }, () => {
    let rig: AgentRig;
    let podIndex = 0;

    before(async () => {
      rig = await startAgentRig({ HOST_PROC_DIR: '/proc', ...backend.env });
      rig.api.upsertNamespace(namespaceObject('default'));
      for (let i = 0; i < 40; i++) rig.api.upsertPod(sidecarPod('default', `web-${i}`));
    });
    after(async () => {
      await rig?.close();
    });

    /** The plugin as libcni runs it, with CNI_NETNS_OVERRIDE so the skel's own-netns check does not answer first. */
    const exec = (command: 'ADD' | 'CHECK', netns: string): Promise<ExecResult> => {
      const pod = sidecarPod('default', `web-${podIndex++}`);
      const attachment: PodAttachment = { netns, containerId: `c${podIndex}`, address: '10.99.0.2/24', gateway: '10.99.0.1' };
      const conf = rig.pluginConf(attachment, { plugin_log_level: 'debug' });
      return execPlugin(PLUGIN, { ...cniEnv(command, pod, attachment), CNI_NETNS_OVERRIDE: '1' }, JSON.stringify(conf), {
        timeoutMs: 60_000,
      });
    };
    const add = (netns: string) => exec('ADD', netns);

    const refusedCases = async (t: TestContext, degraded: boolean) => {
      const pid = degraded ? process.pid : (rig.daemon.child.pid as number);
      const cases = [...hostPaths(t, pid), ...notNetnsPaths(t, pid)];
      for (const [what, netns, reason] of cases) {
        // CHECK goes through the same guard: nothing runs in a netns that is not a pod's.
        for (const command of ['ADD', 'CHECK'] as const) {
          const before = await netnsState(TEST_NETNS);
          const res = await exec(command, netns);
          assertRefused(res, netns, reason);
          if (degraded) assert.match(res.stderr, /deciding in the plugin/, `${command} ${what}`);
          else assert.doesNotMatch(res.stderr, /deciding in the plugin/, `${command} ${what}`);
          assert.equal(await netnsState(TEST_NETNS), before, `${command} ${what}: the node's netfilter state and ipsets changed`);
        }
      }
    };

    it('the agent refuses each ADD and CHECK with code 8 naming the netns; nothing runs', async (t) => {
      await refusedCases(t, false);
    });

    it('a real pod netns is still programmed by the agent', async (t) => {
      const net = createPodNetworkFixture(t);
      const res = await add(net.pod.path);
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.match(await netnsRuleset(net.pod.path), CAPTURE_CHAIN);
    });

    it('with the agent down, degraded mode refuses each ADD and CHECK the same way', async (t) => {
      await rig.daemon.stop('SIGKILL');
      await refusedCases(t, true);
    });

    it('and degraded mode still programs a real pod netns', async (t) => {
      const net = createPodNetworkFixture(t);
      const res = await add(net.pod.path);
      assert.equal(res.code, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
      assert.match(res.stderr, /deciding in the plugin/);
      assert.match(await netnsRuleset(net.pod.path), CAPTURE_CHAIN);
    });
  });

for (const backend of backends)
  test(`repair in place never programs the node netns its search returned [${backend.name}]`, { skip: kernelSkip }, async (t) => {
    const guard = createPodNetnsGuard({ hostProcDir: '/proc' });
    const capture = createSidecarCaptureManager({
      runner: createExecCommandRunner(),
      openScratchNetns: createScratchNetnsOpener(),
      netnsGuard: guard,
      nativeNftables: backend.name === 'nft',
      env: captureEnvironmentFrom({}),
      ...('FORCE_IPTABLES_BINARY' in backend.env ? { forceIptablesBinary: backend.env.FORCE_IPTABLES_BINARY } : {}),
    });
    const pod = sidecarPod('default', 'broken-0') as unknown as Pod;
    const broken = { ...pod, status: { podIP: '10.99.0.2' } };
    const net = createPodNetworkFixture(t);
    for (const found of [TEST_NETNS, '/proc/self/ns/net', bindMount(t, TEST_NETNS)]) {
      let handle: NetnsHandle | undefined;
      const repair = createInPlaceRepairer({
        findNetns: async () => (handle = openNetnsHandle(found)),
        checkNetns: (netns) => guard.check(netns),
        capture,
      });
      const before = await netnsState(TEST_NETNS);
      await assert.rejects(
        repair(broken),
        (err: unknown) =>
          err instanceof PodNetnsRefusedError &&
          err.message.startsWith(`refusing network namespace ${JSON.stringify(found)}`) &&
          HOST_REASON.test(err.message),
      );
      assert.equal(handle?.closed, true, 'the found handle is closed');
      assert.equal(await netnsState(TEST_NETNS), before, `${found}: the node's state changed`);
      // The capture itself refuses it too, should a caller skip the check.
      await assert.rejects(capture.apply(broken, found), PodNetnsRefusedError);
      assert.equal(await netnsState(TEST_NETNS), before);
    }
    const repair = createInPlaceRepairer({
      findNetns: async () => openNetnsHandle(net.pod.path),
      checkNetns: (netns) => guard.check(netns),
      capture,
    });
    assert.match(await repair(broken), /dppod-.* \(inode \d+, /);
    assert.match(await netnsRuleset(net.pod.path), CAPTURE_CHAIN);
  });

const ambientBackends = [
  { name: 'iptables-nft', env: { FORCE_IPTABLES_BINARY: 'nft' } },
  { name: 'iptables-legacy', env: { FORCE_IPTABLES_BINARY: 'legacy' } },
  { name: 'nft', env: { NATIVE_NFTABLES: 'true' } },
] as const;

for (const backend of ambientBackends)
  describe(`ambient ADD of the node netns is refused [${backend.name}]`, { skip: kernelSkip, timeout: 240_000 }, () => {
    let kubelet: FakeKubelet | undefined;
    let node: AmbientNode;
    let rig: AmbientRig;
    let podIndex = 0;
    const NS = 'amb-guard';

    before(async () => {
      if (backend.name === 'nft') kubelet = await startFakeKubelet(4242);
      node = createAmbientNode();
      rig = await startAmbientRig(node.netns.path, backend.env);
      await rig.startDaemon();
      rig.api.upsertNamespace(namespaceObject(NS, { [AMBIENT_LABEL]: 'ambient' }));
      for (let i = 0; i < 12; i++) rig.api.upsertPod(plainPod(NS, `amb-${i}`));
    });
    after(async () => {
      await rig?.close();
      await node?.remove();
      await kubelet?.stop();
    });

    it('by /proc/1/ns/net, a bind mount, a ".." path and the daemon\'s own netns: code 8, no rule, no probe-set entry', async (t) => {
      const daemonPid = rig.daemon.child.pid as number;
      const nodeName = node.netns.path.split('/').pop() as string;
      const cases: [string, string, RegExp][] = [
        ['/proc/1/ns/net', '/proc/1/ns/net', /it cannot be opened|it is the node's own network namespace|istio-cni/],
        ['the node netns by name', node.netns.path, HOST_REASON],
        ['a bind mount of the node netns', bindMount(t, node.netns.path), HOST_REASON],
        ['a ".." path to the node netns', `/var/run/netns/../netns/${nodeName}`, HOST_REASON],
        ["the daemon's own netns", `/proc/${daemonPid}/ns/net`, HOST_REASON],
        ...notNetnsPaths(t, daemonPid),
      ];
      for (const [what, netns, reason] of cases) {
        const before = await netnsState(node.netns.path);
        const pod = plainPod(NS, `amb-${podIndex++}`);
        const attachment: PodAttachment = { netns, containerId: `a${podIndex}`, address: '10.96.0.2/24', gateway: '10.96.0.1' };
        const conf = rig.pluginConf(attachment, { plugin_log_level: 'debug' });
        const res = await execPlugin(PLUGIN, { ...cniEnv('ADD', pod, attachment), CNI_NETNS_OVERRIDE: '1' }, JSON.stringify(conf), {
          timeoutMs: 60_000,
        });
        assertRefused(res, netns, reason);
        assert.equal(await netnsState(node.netns.path), before, `${what}: the node's netfilter state or probe set changed`);
      }
    });
  });
