import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ambientConfigFromOptions } from '@istio-cni/capture';
import {
  deleteAmbientHostRules,
  AmbientDataplaneError,
  applyAmbientPodRules,
  CommandError,
  createAmbientHostRules,
  createIpsetProbeSets,
  createNftProbeSets,
  createRecordingCommandRunner,
  deleteAmbientPodRules,
  findKubeletUid,
  iptablesBinaries,
  type IptablesBackend,
  type OpenScratchNetns,
  parseIpsetSave,
  parseNftSetJson,
  planAmbientPodRules,
  type ProbeSetEntry,
  type ProbeSetManager,
  type ProcFs,
  type RecordedCall,
  syncProbeSets,
} from '@istio-cni/dataplane';

const v4 = ambientConfigFromOptions({});
const dual = ambientConfigFromOptions({ enableIPv6: true });
const nftBackend = { kind: 'nft' } as const;
const legacy: IptablesBackend = {
  flavor: 'legacy',
  nfTables: false,
  version: { major: 1, minor: 8, patch: 9 },
  binaries: iptablesBinaries('legacy'),
};
const iptBackend = { kind: 'iptables', iptables: legacy } as const;
const scratch: OpenScratchNetns = async () => ({ path: '/proc/99/ns/net', close: async () => {} });
const netns = '/proc/1234/fd/7';

function failure(argv: readonly string[], stderr: string): CommandError {
  return new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv, exitCode: 1, stdout: '', stderr });
}

test('in-pod apply adds the mark rule and loopback route first, then restores the rules', async () => {
  const runner = createRecordingCommandRunner();
  const result = await applyAmbientPodRules({ runner, openScratchNetns: scratch }, { netns, config: v4, backend: iptBackend });
  assert.deepEqual(result.outcome, { ipv4: 'applied', ipv6: 'skipped' });
  const argv = runner.calls.map((c) => c.argv.join(' '));
  assert.deepEqual(argv, ['ip -4 -force -batch -', 'iptables-legacy-restore --noflush --wait=30']);
  assert.equal(
    runner.calls[0]?.options.stdin,
    'rule add fwmark 0x111/0xfff pref 32764 lookup 100\nroute replace local 0.0.0.0/0 dev lo table 100\n',
  );
  assert.ok(runner.calls.every((c) => c.options.netns === netns));
  assert.equal(
    runner.calls.at(-1)?.options.stdin,
    planAmbientPodRules(v4, iptBackend).backend === 'iptables'
      ? (planAmbientPodRules(v4, iptBackend) as { documents: { ipv4: string } }).documents.ipv4
      : '',
  );
  assert.deepEqual(runner.calls.at(-1)?.options.env, { XTABLES_LOCKFILE: netns });
});

test('an existing mark rule (EEXIST) is tolerated; IPv6 route skipped when the pod loopback has IPv6 disabled', async () => {
  const runner = createRecordingCommandRunner(({ argv, options }) => {
    if (argv.includes('-batch')) {
      // The kernel refuses the duplicate rule; the route line still ran (-force).
      return options.stdin?.startsWith('rule add') ? failure(argv, 'RTNETLINK answers: File exists\nCommand failed -:1\n') : undefined;
    }
    if (argv[0] === 'cat') return { stdout: '1\n', stderr: '' };
    return undefined;
  });
  await applyAmbientPodRules({ runner, openScratchNetns: scratch }, { netns, config: dual, backend: nftBackend });
  const batches = runner.calls.filter((c) => c.argv.includes('-batch'));
  assert.deepEqual(
    batches.map((c) => c.argv.join(' ')),
    ['ip -4 -force -batch -', 'ip -6 -force -batch -'],
  );
  assert.equal(
    batches[0]?.options.stdin,
    'rule add fwmark 0x111/0xfff pref 32764 lookup 100\nroute replace local 0.0.0.0/0 dev lo table 100\n',
  );
  assert.ok(!(batches[1]?.options.stdin ?? '').includes('::/0'), 'no IPv6 loopback route');
  const argv = runner.calls.map((c) => c.argv.join(' '));
  assert.deepEqual(argv.slice(-3), ['nft -j list chains', 'nft list chains', 'nft -f -']);
  assert.match(runner.calls.at(-1)?.options.stdin ?? '', /^add table inet istio-ambient-nat/m);
});

test('a failing route line is an error even when the rule line only said EEXIST', async () => {
  const runner = createRecordingCommandRunner(({ argv }) =>
    argv.includes('-batch')
      ? failure(argv, 'RTNETLINK answers: File exists\nCommand failed -:1\nRTNETLINK answers: No such device\nCommand failed -:2\n')
      : undefined,
  );
  await assert.rejects(
    applyAmbientPodRules({ runner, openScratchNetns: scratch }, { netns, config: v4, backend: iptBackend }),
    /No such device/,
  );
});

test('in-pod delete runs every iptables step, then removes the ip rule and routes; absent ones are not errors', async () => {
  const runner = createRecordingCommandRunner(({ argv }) => {
    if (argv[0]?.startsWith('iptables') || argv[0]?.startsWith('ip6tables')) return failure(argv, 'No chain/target/match by that name.');
    if (argv.includes('list')) return { stdout: '', stderr: '' };
    if (argv.includes('route')) return failure(argv, 'RTNETLINK answers: No such process');
    return undefined;
  });
  await deleteAmbientPodRules({ runner, openScratchNetns: scratch }, { netns, config: dual, backend: iptBackend });
  const argv = runner.calls.map((c) => c.argv.join(' '));
  assert.equal(argv.filter((a) => a.startsWith('iptables-legacy ')).length, 18);
  assert.equal(argv.filter((a) => a.startsWith('ip6tables-legacy ')).length, 18);
  assert.equal(argv[0], 'iptables-legacy -t mangle -D PREROUTING -j ISTIO_PRERT');
  assert.ok(!argv.some((a) => a.includes('rule del')), 'rule absent: nothing to delete');
  assert.ok(argv.includes('ip -6 route del local ::/0 dev lo table 100'));
});

test('in-pod delete reports real failures together after trying everything', async () => {
  const runner = createRecordingCommandRunner(({ argv }) => {
    if (argv[0] === 'nft') return failure(argv, 'Error: Could not process rule: Operation not permitted');
    if (argv.includes('list')) return { stdout: 'x', stderr: '' };
    if (argv.includes('del') && argv.includes('rule')) return failure(argv, 'RTNETLINK answers: Operation not permitted');
    return undefined;
  });
  await assert.rejects(
    deleteAmbientPodRules({ runner, openScratchNetns: scratch }, { netns, config: v4, backend: nftBackend }),
    (err: unknown) => {
      assert.ok(err instanceof AmbientDataplaneError);
      assert.equal(err.code, 'ERR_AMBIENT_POD_RULES');
      assert.match(
        err.message,
        /^failed to delete in-pod rules in netns "\/proc\/1234\/fd\/7": .*nft -f -.*Operation not permitted; .*ip -4 rule del/,
      );
      return true;
    },
  );
  assert.ok(
    runner.calls.some((c) => c.argv.includes('route')),
    'routes still attempted',
  );
});

const uidA = '863b91d4-4b68-4efa-917f-4b560e3e86aa';
const uidB = 'aaaabbbb-cccc-dddd-eeee-ffff00001111';

test('ipset: create, upsert with the UID as comment, IPv4-mapped unmapped, IPv6 skipped while disabled', async () => {
  const runner = createRecordingCommandRunner();
  const sets = createIpsetProbeSets({ runner, config: v4, netns: '/host/proc/1/ns/net' });
  await sets.create();
  assert.deepEqual(await sets.addPod(uidA, ['::ffff:10.0.0.5', 'fd00::5']), ['10.0.0.5']);
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    [
      'ipset create istio-inpod-probes-v4 hash:ip comment family inet -exist',
      `ipset add istio-inpod-probes-v4 10.0.0.5 comment ${uidA} -exist`,
    ],
  );
  assert.ok(runner.calls.every((c) => c.options.netns === '/host/proc/1/ns/net'));
  const six = createRecordingCommandRunner();
  await createIpsetProbeSets({ runner: six, config: dual }).addPod(uidA, ['fd00::5']);
  assert.deepEqual(
    six.calls.map((c) => c.argv.join(' ')),
    [`ipset add istio-inpod-probes-v6 fd00::5 comment ${uidA} -exist`],
  );
  assert.deepEqual(six.calls[0]?.options, {});
});

test('ipset: bad pod IPs and UIDs are refused before anything runs', async () => {
  const runner = createRecordingCommandRunner();
  const sets = createIpsetProbeSets({ runner, config: v4 });
  await assert.rejects(sets.addPod(uidA, ['10.0.0.300']), /invalid pod IP "10.0.0.300"/);
  await assert.rejects(sets.addPod('a" -exist', ['10.0.0.1']), /invalid pod UID/);
  assert.equal(runner.calls.length, 0);
});

const saved = [
  'create istio-inpod-probes-v4 hash:ip family inet hashsize 1024 maxelem 65536 comment bucketsize 12 initval 0x7c9fb313',
  `add istio-inpod-probes-v4 10.0.0.5 comment "${uidA}"`,
  `add istio-inpod-probes-v4 10.0.0.6 comment "${uidB}"`,
  'add istio-inpod-probes-v4 10.0.0.7',
].join('\n');

test('ipset save output is parsed with comments', () => {
  assert.deepEqual(parseIpsetSave(saved, 'istio-inpod-probes-v4', 4), [
    { family: 4, ip: '10.0.0.5', uid: uidA },
    { family: 4, ip: '10.0.0.6', uid: uidB },
    { family: 4, ip: '10.0.0.7' },
  ]);
});

test('ipset: removal deletes only entries whose comment is the pod UID', async () => {
  const runner = createRecordingCommandRunner(({ argv }) => (argv[1] === 'save' ? { stdout: saved, stderr: '' } : undefined));
  const sets = createIpsetProbeSets({ runner, config: v4 });
  const result = await sets.removePod(uidA, ['10.0.0.5', '10.0.0.6']);
  assert.deepEqual(result, { removed: ['10.0.0.5'], keptForOtherPods: [{ family: 4, ip: '10.0.0.6', uid: uidB }] });
  assert.deepEqual(
    runner.calls.filter((c) => c.argv[1] === 'del').map((c) => c.argv.join(' ')),
    ['ipset del istio-inpod-probes-v4 10.0.0.5 -exist'],
  );
});

test('ipset: flush and destroy tolerate missing sets, other failures are errors', async () => {
  const runner = createRecordingCommandRunner(({ argv }) => failure(argv, 'ipset v7.17: The set with the given name does not exist'));
  const sets = createIpsetProbeSets({ runner, config: dual });
  await sets.flush();
  await sets.destroy();
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    [
      'ipset flush istio-inpod-probes-v4',
      'ipset flush istio-inpod-probes-v6',
      'ipset destroy istio-inpod-probes-v4',
      'ipset destroy istio-inpod-probes-v6',
    ],
  );
  const denied = createIpsetProbeSets({
    runner: createRecordingCommandRunner(({ argv }) => failure(argv, 'Operation not permitted')),
    config: v4,
  });
  await assert.rejects(denied.flush(), (err: unknown) => err instanceof AmbientDataplaneError && err.code === 'ERR_AMBIENT_PROBE_SET');
});

test('nft sets: upsert replaces the comment in one transaction; removal matches the comment', async () => {
  const listing = JSON.stringify({
    nftables: [
      { metainfo: {} },
      {
        set: {
          name: 'istio-inpod-probes-v4',
          elem: [{ elem: { val: '10.0.0.5', comment: uidA } }, { elem: { val: '10.0.0.6', comment: uidB } }, '10.0.0.7'],
        },
      },
    ],
  });
  assert.deepEqual(parseNftSetJson(listing, 4), [
    { family: 4, ip: '10.0.0.5', uid: uidA },
    { family: 4, ip: '10.0.0.6', uid: uidB },
    { family: 4, ip: '10.0.0.7' },
  ]);
  const runner = createRecordingCommandRunner(({ argv }) => (argv.includes('-j') ? { stdout: listing, stderr: '' } : undefined));
  const sets = createNftProbeSets({ runner, config: v4 });
  await sets.addPod(uidA, ['10.0.0.5']);
  assert.equal(
    runner.calls[0]?.options.stdin,
    `add element inet istio-ambient-nat istio-inpod-probes-v4 { 10.0.0.5 comment "${uidA}" }\n` +
      'delete element inet istio-ambient-nat istio-inpod-probes-v4 { 10.0.0.5 }\n' +
      `add element inet istio-ambient-nat istio-inpod-probes-v4 { 10.0.0.5 comment "${uidA}" }\n`,
  );
  const result = await sets.removePod(uidA, ['10.0.0.5', '10.0.0.6']);
  assert.deepEqual(result.removed, ['10.0.0.5']);
  assert.equal(runner.calls.at(-1)?.options.stdin, 'delete element inet istio-ambient-nat istio-inpod-probes-v4 { 10.0.0.5 }\n');
});

/** An in-memory ProbeSetManager for the sync rules. */
function memorySets(initial: ProbeSetEntry[] = []): ProbeSetManager & { entries: Map<string, ProbeSetEntry> } {
  const entries = new Map(initial.map((e) => [e.ip, e]));
  return {
    entries,
    create: async () => {},
    flush: async () => entries.clear(),
    destroy: async () => entries.clear(),
    list: async () => [...entries.values()],
    addPod: async (uid, ips) => {
      for (const ip of ips) entries.set(ip, { family: ip.includes(':') ? 6 : 4, ip, uid });
      return [...ips];
    },
    removePod: async () => ({ removed: [], keptForOtherPods: [] }),
    removeIp: async (ip) => void entries.delete(ip),
  };
}

const podWith = (uid: string, ips: string[]) => ({ uid, name: uid.slice(0, 4), namespace: 'ns', serviceAccount: 'sa', ips });

test('start-up sync adds every snapshot pod and prunes entries no pod accounts for', async () => {
  const sets = memorySets([
    { family: 4, ip: '10.9.9.9', uid: 'gone' },
    { family: 4, ip: '10.0.0.5', uid: 'old' },
  ]);
  const result = await syncProbeSets(sets, [podWith(uidA, ['10.0.0.5', 'fd00::5']), podWith(uidB, ['10.0.0.6'])]);
  assert.deepEqual(result, { added: ['10.0.0.5', 'fd00::5', '10.0.0.6'], pruned: ['10.9.9.9'], pruneSkipped: false, errors: [] });
  assert.equal(sets.entries.get('10.0.0.5')?.uid, uidA);
});

test('start-up sync skips pruning when a snapshot pod has no IPs yet', async () => {
  const sets = memorySets([{ family: 4, ip: '10.9.9.9', uid: 'maybe-the-ip-less-pod' }]);
  const result = await syncProbeSets(sets, [podWith(uidA, ['10.0.0.5']), podWith(uidB, [])]);
  assert.equal(result.pruneSkipped, true);
  assert.deepEqual(result.pruned, []);
  assert.ok(sets.entries.has('10.9.9.9'));
});

test('start-up sync with no extras prunes nothing; an add failure is reported and the rest go on', async () => {
  const sets = memorySets();
  const failing = {
    ...sets,
    addPod: async (uid: string, ips: readonly string[]) => (uid === uidA ? Promise.reject(new Error('collision')) : sets.addPod(uid, ips)),
  };
  const result = await syncProbeSets(failing, [podWith(uidA, ['10.0.0.5']), podWith(uidB, ['10.0.0.6'])]);
  assert.deepEqual(result.added, ['10.0.0.6']);
  assert.deepEqual(result.errors, [`pod ns/${uidA.slice(0, 4)}: collision`]);
  assert.deepEqual(result.pruned, []);
});

function procWith(processes: Record<string, { comm: string; cmdline: string; uid: number }>): ProcFs {
  const file = (path: string): string => {
    const [pid, name] = path.split('/');
    const p = processes[pid ?? ''];
    if (p === undefined) throw new Error(`ENOENT ${path}`);
    if (name === 'comm') return `${p.comm}\n`;
    if (name === 'cmdline') return p.cmdline.replaceAll(' ', '\0');
    if (name === 'status') return `Name:\t${p.comm}\nUid:\t${p.uid}\t${p.uid + 1}\t0\t0\n`;
    throw new Error(`ENOENT ${path}`);
  };
  return {
    readDir: async () => [...Object.keys(processes), 'self', 'sys'],
    stat: async () => ({ ino: 1, dev: 1 }),
    readFile: async (path) => file(path),
    openNetns: async () => {
      throw new Error('not used');
    },
  };
}

test('kubelet UID: comm kubelet/kubelite need "kubelet" in the command line, k3s does not; real UID', async () => {
  assert.equal(await findKubeletUid(procWith({ 5: { comm: 'kubelet', cmdline: '/usr/bin/kubelet --config x', uid: 1000 } })), 1000);
  assert.equal(
    await findKubeletUid(
      procWith({
        5: { comm: 'kubelet', cmdline: '/usr/bin/impostor', uid: 7 },
        9: { comm: 'kubelite', cmdline: 'kubelite --kubelet-args', uid: 42 },
      }),
    ),
    42,
  );
  assert.equal(await findKubeletUid(procWith({ 3: { comm: 'k3s', cmdline: 'k3s server', uid: 0 } })), 0);
  await assert.rejects(findKubeletUid(procWith({ 1: { comm: 'systemd', cmdline: '/sbin/init', uid: 0 } })), (err: unknown) => {
    return err instanceof AmbientDataplaneError && err.code === 'ERR_AMBIENT_KUBELET_UID';
  });
});

test('host rules (iptables): every copy of the jump is deleted, so the chain can go (an operator added a second)', async () => {
  let copies = 2;
  const runner = createRecordingCommandRunner((call) => {
    if (!call.argv.includes('-D')) return undefined;
    return copies-- > 0 ? undefined : new Error('iptables: Bad rule (does a matching rule exist in that chain?).');
  });
  await deleteAmbientHostRules({ runner, openScratchNetns: scratch }, { config: v4, backend: iptBackend });
  assert.deepEqual(
    runner.calls.map((c) => c.argv.join(' ')),
    [
      'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
      'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
      'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
      'iptables-legacy -w -t nat -F ISTIO_POSTRT',
      'iptables-legacy -w -t nat -X ISTIO_POSTRT',
    ],
  );
});

test('host rules (iptables) in the current netns: old rules removed, then restored with the global xtables lock', async () => {
  const calls: RecordedCall[] = [];
  const runner = createRecordingCommandRunner((call) => {
    calls.push(call);
    // A clean node: no jump to delete.
    return call.argv.includes('-D') ? new Error('iptables: Bad rule (does a matching rule exist in that chain?).') : undefined;
  });
  await createAmbientHostRules({ runner, openScratchNetns: scratch }, { config: v4, backend: iptBackend });
  const argv = runner.calls.map((c) => c.argv.join(' '));
  assert.deepEqual(argv, [
    // Nothing of ours in place (an empty save): no comparison with the plan.
    'iptables-legacy-save',
    'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
    'iptables-legacy -w -t nat -F ISTIO_POSTRT',
    'iptables-legacy -w -t nat -X ISTIO_POSTRT',
    // A single-table document: the restore itself refuses existing ISTIO chains, no save needed.
    'iptables-legacy-restore --noflush --wait=30',
  ]);
  for (const c of runner.calls)
    assert.deepEqual(
      Object.keys(c.options).filter((k) => k !== 'stdin'),
      [],
      'no netns, no lock override',
    );
  assert.equal(
    runner.calls.at(-1)?.options.stdin,
    '* nat\n-N ISTIO_POSTRT\n-I POSTROUTING 1 -j ISTIO_POSTRT\n-A ISTIO_POSTRT -m owner --socket-exists -p tcp -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127\nCOMMIT\n',
  );
});

const hostSave = (rules: string) =>
  `# Generated by iptables-save v1.8.9\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [4:240]\n:ISTIO_POSTRT - [0:0]\n${rules}COMMIT\n`;
const planned =
  '-A POSTROUTING -j ISTIO_POSTRT\n-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127\n';

test('host rules (iptables) exactly in place (a restart, a switch from upstream’s agent) are not touched: probes never lose their SNAT', async () => {
  // The host and the scratch netns (the plan restored, then saved) print the same rules.
  const runner = createRecordingCommandRunner((call) =>
    call.argv[0] === 'iptables-legacy-save' ? { stdout: hostSave(planned), stderr: '' } : undefined,
  );
  await createAmbientHostRules({ runner, openScratchNetns: scratch }, { config: v4, backend: iptBackend });
  const onHost = runner.calls.filter((c) => c.options.netns === undefined).map((c) => c.argv.join(' '));
  assert.deepEqual(onHost, ['iptables-legacy-save'], 'only read on the host');
  assert.ok(
    runner.calls.some((c) => c.options.netns === '/proc/99/ns/net' && c.argv[0] === 'iptables-legacy-restore'),
    'the plan is compared in its kernel form (restored in a scratch netns)',
  );
});

test('host rules (iptables) that differ from the plan (a second copy of the SNAT) are removed and restored', async () => {
  let jumps = 1;
  const runner = createRecordingCommandRunner((call) => {
    if (call.argv.includes('-D')) return jumps-- > 0 ? undefined : new Error('iptables: Bad rule');
    if (call.argv[0] !== 'iptables-legacy-save') return undefined;
    const twice = `${planned}-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127\n`;
    return { stdout: hostSave(call.options.netns === undefined ? twice : planned), stderr: '' };
  });
  await createAmbientHostRules({ runner, openScratchNetns: scratch }, { config: v4, backend: iptBackend });
  const onHost = runner.calls.filter((c) => c.options.netns === undefined).map((c) => c.argv.join(' '));
  assert.deepEqual(onHost, [
    'iptables-legacy-save',
    'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
    'iptables-legacy -w -t nat -D POSTROUTING -j ISTIO_POSTRT',
    'iptables-legacy -w -t nat -F ISTIO_POSTRT',
    'iptables-legacy -w -t nat -X ISTIO_POSTRT',
    'iptables-legacy-restore --noflush --wait=30',
  ]);
});

test('host rules (nft) need the kubelet UID and create sets and rule in one transaction in the host netns', async () => {
  const runner = createRecordingCommandRunner();
  await assert.rejects(
    createAmbientHostRules({ runner, openScratchNetns: scratch }, { config: v4, backend: nftBackend }),
    /kubelet UID is required/,
  );
  await createAmbientHostRules(
    { runner, openScratchNetns: scratch },
    { config: v4, backend: nftBackend, kubeletUid: 1000, hostNetns: '/host/proc/1/ns/net' },
  );
  assert.equal(runner.calls.length, 1);
  assert.equal(runner.calls[0]?.options.netns, '/host/proc/1/ns/net');
  assert.match(
    runner.calls[0]?.options.stdin ?? '',
    /add set inet istio-ambient-nat istio-inpod-probes-v4[\s\S]*skuid 1000 ip daddr @istio-inpod-probes-v4 counter snat to 169.254.7.127/,
  );
});
