import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  shareProcessScan,
  AmbientDataplaneError,
  type AmbientPod,
  addressesContainAny,
  createNetnsHandle,
  createPodNetnsProcFinder,
  createPodProcessNetnsLocator,
  type NetnsOwnershipCheck,
  parseProcCgroup,
  parseProcStarttime,
  podIdentityFromCgroupPath,
  podIdentityFromCgroups,
  type ProcFs,
} from '@istio-cni/dataplane';
import { UPSTREAM_TESTDATA } from '../../../test/support/upstreamTestdata.ts';

const fixtureRoot = join(UPSTREAM_TESTDATA, 'cni/pkg/nodeagent/testdata/cgroupns');
const podA = '863b91d4-4b68-4efa-917f-4b560e3e86aa';
const podB = 'aaaabbbb-cccc-dddd-eeee-ffff00001111';

/**
 * The upstream fixture tree as a ProcFs, with upstream's fake inode numbering (testdata/upstream/inputs.md §6.1):
 * every stat or open of a path gets a fresh inode from a running counter unless the path is
 * pinned, so the host reference (`1/ns/net`, stat-ed first) is inode 1 and matches nothing
 * later; `sameInode` gives everything inode 0, so every process looks like the host. Open
 * handles are counted so tests can check nothing leaks.
 */
function fakeProcFs(options: { sameInode?: boolean; pinned?: Record<string, number> } = {}) {
  let next = 1;
  let nextFd = 100;
  const open = new Set<number>();
  const inodeOf = (path: string): number => {
    if (options.sameInode === true) return 0;
    return options.pinned?.[path] ?? next++;
  };
  const fs: ProcFs = {
    async readDir() {
      return readdirSync(fixtureRoot);
    },
    async stat(path) {
      readFileSync(join(fixtureRoot, path));
      return { ino: inodeOf(path), dev: 3 };
    },
    async readFile(path) {
      return readFileSync(join(fixtureRoot, path), 'utf8');
    },
    async openNetns(path, opts = {}) {
      const fd = nextFd++;
      open.add(fd);
      return createNetnsHandle({ fd, inode: inodeOf(path), source: path, ...opts, release: (f) => open.delete(f) });
    },
  };
  return { fs, openHandles: () => open.size };
}

function pod(uid: string, ips: string[], name = 'foo'): AmbientPod {
  return { uid, name, namespace: 'bar', serviceAccount: 'default', ips };
}

const always: NetnsOwnershipCheck = async () => true;

test('the oldest process of a pod wins the procfs scan (fixture dir 1)', async () => {
  const { fs, openHandles } = fakeProcFs();
  const finder = await createPodNetnsProcFinder({ procFs: fs, checkOwnership: always });
  const found = await finder.findNetnsForPods(new Map([[podA, pod(podA, ['10.0.0.42'])]]));
  assert.deepEqual([...found.keys()], [podA]);
  const a = found.get(podA);
  assert.equal(a?.netns.ownerStartTime, 70298968);
  assert.equal(a?.netns.source, '1/ns/net');
  assert.equal(openHandles(), 1, 'losing candidates (dirs 0 and 2) are closed by the scan');
  a?.netns.close();
  assert.equal(openHandles(), 0);
});

test('a foreign process transiting another pod netns is rejected and the rightful pod still claims it', async () => {
  const shared = 4242;
  const { fs, openHandles } = fakeProcFs({ pinned: { '2/ns/net': shared, '3/ns/net': shared } });
  let foreignRejected = false;
  const check: NetnsOwnershipCheck = async (ns, ips) => {
    const owned = ns.inode === shared ? ips.includes('10.0.0.2') : ips.includes('10.0.0.1');
    if (ns.inode === shared && !owned) foreignRejected = true;
    return owned;
  };
  const finder = await createPodNetnsProcFinder({ procFs: fs, checkOwnership: check });
  const found = await finder.findNetnsForPods(
    new Map([
      [podA, pod(podA, ['10.0.0.1'])],
      [podB, pod(podB, ['10.0.0.2'], 'baz')],
    ]),
  );
  assert.equal(foreignRejected, true);
  assert.equal(found.size, 2);
  assert.notEqual(found.get(podA)?.netns.inode, shared);
  assert.equal(found.get(podA)?.netns.ownerStartTime, 70298968);
  assert.equal(found.get(podB)?.netns.inode, shared);
  assert.equal(openHandles(), 2);
  for (const f of found.values()) f.netns.close();
  assert.equal(openHandles(), 0);
});

test('the process locator: each pod UID with its oldest process and netns, re-checked alone, entered only to look for the IPs', async () => {
  const { fs, openHandles } = fakeProcFs({ pinned: { '1/ns/net': 500 } });
  const checked: { inode: number; ips: readonly string[] }[] = [];
  const locator = await createPodProcessNetnsLocator({
    procFs: fs,
    checkOwnership: async (ns, ips) => {
      checked.push({ inode: ns.inode, ips });
      return true;
    },
    hostNetnsPath: '/proc/self/ns/net',
  });
  const found = (await locator.scan()).get(podA);
  assert.deepEqual(found, { pid: '1', startTime: 70298968, inode: 500 });
  assert.deepEqual(checked, [], 'the scan enters no netns');
  assert.equal(await locator.stillIn(found), true);
  assert.equal(await locator.stillIn({ ...found, startTime: 1 }), false, 'a reused pid is another process');
  assert.equal(await locator.stillIn({ ...found, inode: 501 }), false, 'moved to another netns');
  assert.equal(await locator.carries(found, ['10.0.0.42']), true);
  assert.deepEqual(checked, [{ inode: 500, ips: ['10.0.0.42'] }]);
  assert.equal(openHandles(), 0);
});

test('a pod without IPs is deferred without entering any netns', async () => {
  const { fs, openHandles } = fakeProcFs();
  let calls = 0;
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async () => {
      calls++;
      return true;
    },
  });
  const found = await finder.findNetnsForPods(new Map([[podA, pod(podA, [])]]));
  assert.equal(found.size, 0);
  assert.equal(calls, 0);
  assert.equal(openHandles(), 0);
});

test('a dual-stack pod is accepted by any of its IPs, all offered in one check', async () => {
  const { fs } = fakeProcFs();
  let offered: readonly string[] = [];
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async (_ns, ips) => {
      offered = ips;
      return ips.includes('fd00::42');
    },
  });
  const found = await finder.findNetnsForPods(new Map([[podA, pod(podA, ['10.0.0.42', 'fd00::42'])]]));
  assert.equal(found.size, 1);
  assert.deepEqual(offered, ['10.0.0.42', 'fd00::42']);
  for (const f of found.values()) f.netns.close();
});

test('an ownership check that fails closes the candidate and rejects the pairing', async () => {
  const { fs, openHandles } = fakeProcFs();
  const warnings: string[] = [];
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async () => {
      throw new Error('bad netns');
    },
    log: (level, message) => level === 'warn' && warnings.push(message),
  });
  const found = await finder.findNetnsForPods(new Map([[podA, pod(podA, ['10.0.0.42'])]]));
  assert.equal(found.size, 0);
  assert.equal(openHandles(), 0);
  assert.match(warnings[0] ?? '', /could not verify netns ownership for pod bar\/foo: bad netns/);
});

test('a process in the host netns is never paired (host-netns guard)', async () => {
  const { fs, openHandles } = fakeProcFs({ sameInode: true });
  const finder = await createPodNetnsProcFinder({ procFs: fs, checkOwnership: always });
  const found = await finder.findNetnsForPods(new Map([[podA, pod(podA, ['10.0.0.42'])]]));
  assert.equal(found.size, 0);
  assert.equal(openHandles(), 0);
});

test('pods not asked for are not opened', async () => {
  const { fs, openHandles } = fakeProcFs();
  let calls = 0;
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async () => {
      calls++;
      return true;
    },
  });
  const found = await finder.findNetnsForPods(new Map([[podB, pod(podB, ['10.0.0.2'])]]));
  assert.deepEqual([...found.keys()], [podB]);
  assert.equal(calls, 1);
  assert.equal(openHandles(), 1);
});

// Upstream TestGetContainerIDFromCGroups, plus the path formats listed in its source comments.
const cgroupCases: { name: string; paths: string[]; podUid?: string; containerId?: string; error?: string }[] = [
  { name: 'no cgroups', paths: [], podUid: '', containerId: '' },
  { name: 'no container ID in cgroups', paths: ['/user.slice'], podUid: '', containerId: '' },
  {
    name: 'one container ID in cgroups',
    paths: [
      '/user.slice',
      '/kubepods/pod2c48913c-b29f-11e7-9350-020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
    ],
    podUid: '2c48913c-b29f-11e7-9350-020968147796',
    containerId: '9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
  },
  {
    name: 'pod UID canonicalized',
    paths: [
      '/user.slice',
      '/kubepods/pod2c48913c_b29f_11e7_9350_020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
    ],
    podUid: '2c48913c-b29f-11e7-9350-020968147796',
    containerId: '9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
  },
  {
    name: 'cri-o',
    paths: ['0::/../crio-45490e76e0878aaa4d9808f7d2eefba37f093c3efbba9838b6d8ab804d9bd814.scope'],
    podUid: '',
    containerId: '45490e76e0878aaa4d9808f7d2eefba37f093c3efbba9838b6d8ab804d9bd814',
  },
  {
    name: 'more than one container ID in cgroups',
    paths: [
      '/user.slice',
      '/kubepods/pod2c48913c-b29f-11e7-9350-020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
      '/kubepods/kubepods/besteffort/pod2c48913c-b29f-11e7-9350-020968147796/a55d9ac3b312d8a2627824b6d6dd8af66fbec439bf4e0ec22d6d9945ad337a38',
    ],
    error:
      'multiple container IDs found in cgroups (9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961, a55d9ac3b312d8a2627824b6d6dd8af66fbec439bf4e0ec22d6d9945ad337a38)',
  },
  {
    name: 'more than one pod UID in cgroups',
    paths: [
      '/user.slice',
      '/kubepods/pod11111111-b29f-11e7-9350-020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
      '/kubepods/kubepods/besteffort/pod22222222-b29f-11e7-9350-020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
    ],
    error: 'multiple pod UIDs found in cgroups (11111111-b29f-11e7-9350-020968147796, 22222222-b29f-11e7-9350-020968147796)',
  },
  {
    name: 'cgroupfs driver under docker',
    paths: [
      '/docker/8d461fa5765781bcf5f7eb192f101bc3103d4b932e26236f43feecfa20664f96/kubepods/besteffort/poddaa5c7ee-3484-4533-af39-3591564fd03e/aff34703e5e1f89443e9a1bffcc80f43f74d4808a2dd22c8f88c08547b323934',
    ],
    podUid: 'daa5c7ee-3484-4533-af39-3591564fd03e',
    containerId: 'aff34703e5e1f89443e9a1bffcc80f43f74d4808a2dd22c8f88c08547b323934',
  },
  {
    name: 'systemd driver with docker',
    paths: [
      '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2c48913c-b29f-11e7-9350-020968147796.slice/docker-9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961.scope',
    ],
    podUid: '2c48913c-b29f-11e7-9350-020968147796',
    containerId: '9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
  },
  {
    name: 'systemd driver with containerd (colon separated)',
    paths: [
      '/kubepods-besteffort-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice:cri-containerd:b2a102854b4969b2ce98dc329c86b4fb2b06e4ad2cc8da9d8a7578c9cd2004a2',
    ],
    podUid: '72f7f152-440c-66ac-9084-e0fc1d8a910c',
    containerId: 'b2a102854b4969b2ce98dc329c86b4fb2b06e4ad2cc8da9d8a7578c9cd2004a2',
  },
  {
    name: 'cgroup namespace relative path',
    paths: ['/../../pod2c48913c-b29f-11e7-9350-020968147796/9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961'],
    podUid: '2c48913c-b29f-11e7-9350-020968147796',
    containerId: '9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961',
  },
  {
    name: 'cri-o with the systemd driver carries the pod UID',
    paths: [
      '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2c48913c_b29f_11e7_9350_020968147796.slice/crio-45490e76e0878aaa4d9808f7d2eefba37f093c3efbba9838b6d8ab804d9bd814.scope',
    ],
    podUid: '2c48913c-b29f-11e7-9350-020968147796',
    containerId: '45490e76e0878aaa4d9808f7d2eefba37f093c3efbba9838b6d8ab804d9bd814',
  },
  {
    name: 'kind-in-docker fixture path',
    paths: [readFileSync(join(fixtureRoot, '3/cgroup'), 'utf8').trim().slice(3)],
    podUid: podB,
    containerId: '85c7fe7ad0df679971e755bd97b84dd68a32e1eba8e8f99b01ab3c07196a3e4a',
  },
];

for (const c of cgroupCases) {
  test(`cgroup paths: ${c.name}`, () => {
    const cgroups = c.paths.map((path) => ({ hierarchyId: '', controllers: '', path }));
    if (c.error !== undefined) {
      assert.throws(
        () => podIdentityFromCgroups(cgroups),
        (err: unknown) => err instanceof AmbientDataplaneError && err.message === c.error,
      );
      return;
    }
    assert.deepEqual(podIdentityFromCgroups(cgroups), { podUid: c.podUid, containerId: c.containerId });
  });
}

test('hostile cgroup paths neither hang the scan nor match', () => {
  // Upstream's `(?:[[:^punct:]]*/*)*` would backtrack exponentially on these in V8.
  assert.equal(podIdentityFromCgroupPath(`/${'a'.repeat(4000)}!`), undefined);
  assert.equal(podIdentityFromCgroupPath(`/pod${'1'.repeat(8)}-${'a/'.repeat(2000)}-`), undefined);
  assert.equal(
    podIdentityFromCgroupPath(`/kubepods/pod2c48913c-b29f-11e7-9350-020968147796/${'9'.repeat(5000)}`),
    undefined,
    'longer than PATH_MAX',
  );
});

test('parseProcCgroup splits hierarchy, controllers and a path that may contain colons', () => {
  assert.deepEqual(parseProcCgroup('12:cpu,cpuacct:/a:b:c\n0::/\n'), [
    { hierarchyId: '12', controllers: 'cpu,cpuacct', path: '/a:b:c' },
    { hierarchyId: '0', controllers: '', path: '/' },
  ]);
  assert.throws(() => parseProcCgroup('0:/only-one-colon\n'), /invalid cgroup entry "0:\/only-one-colon"/);
});

test('parseProcStarttime reads field 22 after the last parenthesis', () => {
  assert.equal(parseProcStarttime(readFileSync(join(fixtureRoot, '1/stat'), 'utf8')), 70298968);
  const tricky = `42 (a) b) c) S ${Array.from({ length: 18 }, (_, i) => String(i)).join(' ')} 777 9`;
  assert.equal(parseProcStarttime(tricky), 777);
  assert.throws(() => parseProcStarttime('1 (x) S 2 3'), /not enough fields in stat/);
  assert.throws(() => parseProcStarttime('no paren'), /invalid stat format/);
});

test('addressesContainAny compares canonically and unmaps IPv4-mapped addresses', () => {
  assert.equal(addressesContainAny(['10.0.0.5'], ['10.0.0.5']), true);
  assert.equal(addressesContainAny(['::ffff:10.0.0.5'], ['10.0.0.5']), true);
  assert.equal(addressesContainAny(['fd00:0::42'], ['fd00::42']), true);
  assert.equal(addressesContainAny(['fd00::42'], ['10.0.0.5', 'fd00::42']), true);
  assert.equal(addressesContainAny(['10.0.0.6'], ['10.0.0.5']), false);
  assert.equal(addressesContainAny(['not-an-ip'], ['10.0.0.5']), false);
  assert.equal(addressesContainAny([], ['10.0.0.5']), false);
  assert.throws(() => addressesContainAny(['10.0.0.5'], ['10.0.0.300']), /invalid pod IP "10.0.0.300"/);
});

test('a shared process scan serves every caller within its TTL, again when fresh or dropped, and never keeps a failed scan', async () => {
  let t = 0;
  let scans = 0;
  let fail = false;
  const shared = shareProcessScan(
    async () => {
      scans++;
      if (fail) throw new Error('EACCES');
      return new Map([['uid-a', { pid: '7', startTime: 1, inode: 42 }]]);
    },
    1000,
    () => t,
  );
  await shared.get();
  t = 1000;
  assert.equal((await shared.get()).get('uid-a')?.inode, 42);
  assert.equal(scans, 1, 'within the TTL: one scan');
  await shared.get(true);
  t = 2001;
  await shared.get();
  shared.drop();
  await shared.get();
  assert.equal(scans, 4, 'fresh, expired, dropped: a scan each');
  fail = true;
  await assert.rejects(shared.get(true), /EACCES/);
  fail = false;
  assert.equal((await shared.get()).size, 1, 'the failed scan was not kept');
  assert.equal(scans, 6);
});
