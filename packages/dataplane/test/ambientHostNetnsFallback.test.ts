import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { test } from 'node:test';
import { createNetnsHandle, createPodNetnsProcFinder, type NetnsHandle, type ProcFs } from '@istio-cni/dataplane';

const uid = '863b91d4-4b68-4efa-917f-4b560e3e86aa';
const cgroup = `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${uid.replaceAll('-', '_')}.slice/cri-containerd-${'ab'.repeat(32)}.scope\n`;
const stat0 = '1 (pause) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n';

/**
 * Pid 7 sits in netns inode 70 with a pod cgroup, pid 8 in the agent's own netns (inode 50) with
 * the same cgroup; `1/ns/net` fails like the sandbox's EACCES unless `pid1Readable`.
 */
function procFs(pid1Readable: boolean): { fs: ProcFs; stats: string[] } {
  const stats: string[] = [];
  const inodes: Record<string, number> = { 'self/ns/net': 50, '7/ns/net': 70, '8/ns/net': 50 };
  const fs: ProcFs = {
    async readDir() {
      return ['1', '7', '8'];
    },
    async stat(path) {
      stats.push(path);
      if (path === '1/ns/net' && !pid1Readable)
        throw Object.assign(new Error(`EACCES: permission denied, stat '/proc/1/ns/net'`), { code: 'EACCES' });
      if (path === '1/ns/net') return { ino: 10, dev: 4 };
      const ino = inodes[path];
      if (ino === undefined) throw new Error(`ENOENT ${path}`);
      return { ino, dev: 4 };
    },
    async readFile(path) {
      if (path.endsWith('/stat')) return stat0;
      if (path === '7/cgroup' || path === '8/cgroup') return cgroup;
      throw new Error(`ENOENT ${path}`);
    },
    async openNetns(path, opts = {}): Promise<NetnsHandle> {
      return createNetnsHandle({ fd: 1000, inode: inodes[path] ?? 0, source: path, ...opts, release: () => {} });
    },
  };
  return { fs, stats };
}

const pods = new Map([[uid, { uid, name: 'a', namespace: 'ns', serviceAccount: 'sa', ips: ['10.0.0.2'] }]]);

test('an unreadable pid 1 makes the scan use its own netns as the host one, with a warning (regression: start-up failed)', async () => {
  const { fs } = procFs(false);
  const warnings: string[] = [];
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async () => true,
    log: (level, m) => level === 'warn' && warnings.push(m),
  });
  const found = await finder.findNetnsForPods(pods);
  assert.equal(found.get(uid)?.netns.inode, 70, 'the pod netns is found; the process in our own netns is skipped');
  found.get(uid)?.netns.close();
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? '', /cannot inspect the host netns through pid 1 \(EACCES.*\); treating this process's netns as the host's/);
});

test('a readable pid 1 stays the host reference (upstream behaviour, no warning)', async () => {
  const { fs, stats } = procFs(true);
  const warnings: string[] = [];
  const finder = await createPodNetnsProcFinder({
    procFs: fs,
    checkOwnership: async () => true,
    log: (level, m) => level === 'warn' && warnings.push(m),
  });
  assert.equal(stats[0], '1/ns/net');
  assert.ok(!stats.includes('self/ns/net'));
  const found = await finder.findNetnsForPods(pods);
  // Pid 8 (inode 50) is not the host here, and it is scanned after pid 7 with the same start time.
  assert.ok(found.has(uid));
  for (const f of found.values()) f.netns.close();
  assert.deepEqual(
    warnings.filter((w) => w.includes('pid 1')),
    [],
  );
});

test('an explicit host netns path wins over procfs', async () => {
  const { fs, stats } = procFs(false);
  const self = statSync('/proc/self/ns/net');
  const finder = await createPodNetnsProcFinder({ procFs: fs, checkOwnership: async () => true, hostNetnsPath: '/proc/self/ns/net' });
  assert.ok(!stats.includes('1/ns/net'), 'pid 1 is not consulted');
  assert.ok(self.ino > 0);
  const found = await finder.findNetnsForPods(pods);
  for (const f of found.values()) f.netns.close();
  assert.ok(found.has(uid));
});

test('an explicit host netns path that does not exist fails clearly', async () => {
  const { fs } = procFs(true);
  await assert.rejects(
    createPodNetnsProcFinder({ procFs: fs, checkOwnership: async () => true, hostNetnsPath: '/nonexistent/ns/net' }),
    /ENOENT.*\/nonexistent\/ns\/net/,
  );
});
