import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  type AmbientPod,
  createNetnsDir,
  createNetnsHandle,
  createPodNetnsProcFinder,
  findNetnsByIp,
  isNetnsFileName,
  type NetnsDir,
  type NetnsHandle,
  type ProcFs,
  searchNetnsDir,
} from '@istio-cni/dataplane';

/** Addresses per netns inode; inode 1 is the host's. */
const addresses: Record<number, string[]> = {
  1: ['10.0.0.1'],
  20: ['127.0.0.1', '10.1.1.5'],
  30: ['10.1.1.6'],
  40: ['10.1.1.7'],
  41: ['10.1.1.7'],
  50: ['10.1.1.8', '10.1.1.9'],
};

/** A netns directory whose files are namespaces by inode; records what was opened and listed. */
function fakeDir(files: Record<string, number>) {
  let nextFd = 500;
  const opened: NetnsHandle[] = [];
  const listed: number[] = [];
  const dir: NetnsDir = {
    path: '/var/run/netns',
    async list() {
      return Object.entries(files).map(([name, inode]) => ({ name, inode }));
    },
    open(name) {
      const inode = files[name];
      if (inode === undefined) throw new Error(`ENOENT: ${name}`);
      const h = createNetnsHandle({ fd: nextFd++, inode, source: `/var/run/netns/${name}`, release: () => undefined });
      opened.push(h);
      return h;
    },
  };
  const listAddresses = async (netns: NetnsHandle) => {
    listed.push(netns.inode);
    return addresses[netns.inode] ?? [];
  };
  return { source: { dir, listAddresses }, opened, listed, open: () => opened.filter((h) => !h.closed).map((h) => h.inode) };
}

/** A procfs holding only pid 1 (the host) and, optionally, processes in other namespaces with no pod cgroup. */
function hostOnlyProcFs(others: { pid: number; netns: number }[] = []): ProcFs {
  const procs = new Map([['1', 1], ...others.map((o): [string, number] => [String(o.pid), o.netns])]);
  const netnsOf = (path: string) => {
    const n = procs.get(path.split('/')[0] ?? '');
    if (n === undefined) throw new Error(`ENOENT: ${path}`);
    return n;
  };
  return {
    readDir: async () => [...procs.keys(), 'self'],
    stat: async (path) => ({ ino: path === 'self/ns/net' ? 1 : netnsOf(path), dev: 4 }),
    readFile: async (path) => {
      netnsOf(path);
      return path.endsWith('/cgroup') ? '0::/system.slice/foo.service\n' : '1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 1 1 0';
    },
    openNetns: async (path) => createNetnsHandle({ fd: 900, inode: netnsOf(path), source: path, release: () => undefined }),
  };
}

const checkOwnership = async (netns: NetnsHandle, ips: readonly string[]) => (addresses[netns.inode] ?? []).some((a) => ips.includes(a));
const pod = (uid: string, ips: string[]): AmbientPod => ({ uid, name: uid, namespace: 'ns', serviceAccount: 'default', ips });

describe('searchNetnsDir', () => {
  it('pairs each key with the one namespace holding its IPs, entering each namespace once and skipping known inodes', async () => {
    const d = fakeDir({ a: 20, 'a-again': 20, b: 30, host: 1, c: 50 });
    const found = await searchNetnsDir(
      d.source,
      new Map([
        ['uid-a', ['10.1.1.5']],
        ['uid-c', ['10.1.1.9']],
        ['uid-none', []],
      ]),
      new Set([1, 30]),
      () => {},
    );
    assert.deepEqual(
      [...found].map(([k, h]) => [k, h.inode]),
      [
        ['uid-a', 20],
        ['uid-c', 50],
      ],
    );
    assert.deepEqual(d.listed, [20, 50], 'the skipped inodes (host, already entered) and a second name of one netns are not entered');
    assert.deepEqual(d.open().sort(), [20, 50], 'only the results stay open');
  });

  it('refuses a key two namespaces match, and a namespace holding the IPs of two keys', async () => {
    const logs: string[] = [];
    const d = fakeDir({ x: 40, y: 41, z: 50 });
    const found = await searchNetnsDir(
      d.source,
      new Map([
        ['uid-x', ['10.1.1.7']],
        ['uid-8', ['10.1.1.8']],
        ['uid-9', ['10.1.1.9']],
      ]),
      new Set(),
      (_level, message) => logs.push(message),
    );
    assert.equal(found.size, 0);
    assert.deepEqual(d.open(), [], 'nothing left open');
    assert.ok(logs.some((l) => /2 network namespaces hold the IPs of uid-x/.test(l)));
    assert.ok(logs.some((l) => /holds the IPs of 2 pods/.test(l)));
  });

  it('opens nothing when no key has IPs', async () => {
    const d = fakeDir({ a: 20 });
    assert.equal((await searchNetnsDir(d.source, new Map([['uid', []]]), new Set(), () => {})).size, 0);
    assert.deepEqual(d.opened, []);
  });
});

describe('the procfs scans fall back to the netns directory', () => {
  it('findNetnsByIp: a netns no process is in is found in the directory; inodes the scan entered are not entered again', async () => {
    const d = fakeDir({ held: 30, free: 20 });
    const procFs = hostOnlyProcFs([{ pid: 300, netns: 30 }]);
    const found = await findNetnsByIp({ procFs, checkOwnership, netnsDir: d.source }, '10.1.1.5');
    assert.equal(found?.inode, 20);
    assert.equal(found?.source, '/var/run/netns/free');
    assert.deepEqual(d.listed, [20]);
  });

  it('findNetnsByIp: a netns a process holds wins without reading the directory', async () => {
    const d = fakeDir({ free: 20 });
    const found = await findNetnsByIp(
      { procFs: hostOnlyProcFs([{ pid: 300, netns: 30 }]), checkOwnership, netnsDir: d.source },
      '10.1.1.6',
    );
    assert.equal(found?.inode, 30);
    assert.deepEqual(d.opened, []);
  });

  it('findNetnsByIp: without the directory, a netns no process is in is not found', async () => {
    assert.equal(await findNetnsByIp({ procFs: hostOnlyProcFs(), checkOwnership }, '10.1.1.5'), undefined);
  });

  it('the pod finder: pods procfs does not find are matched by IP in the directory', async () => {
    const d = fakeDir({ free: 20, other: 30 });
    const finder = await createPodNetnsProcFinder({ procFs: hostOnlyProcFs(), checkOwnership, netnsDir: d.source });
    const found = await finder.findNetnsForPods(
      new Map([
        ['uid-a', pod('uid-a', ['10.1.1.5'])],
        ['uid-q', pod('uid-q', ['10.9.9.9'])],
      ]),
    );
    assert.deepEqual(
      [...found].map(([uid, f]) => [uid, f.pod.uid, f.netns.inode]),
      [['uid-a', 'uid-a', 20]],
    );
    assert.deepEqual(d.open(), [20]);
  });
});

describe('createNetnsDir (no root: what is refused)', () => {
  it('lists only mounted namespace files with valid names: no symlink, plain file, FIFO or directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'netns-dir-'));
    try {
      writeFileSync(join(dir, 'plain'), '');
      symlinkSync('/proc/self/ns/net', join(dir, 'link'));
      symlinkSync('/proc/1/ns/net', join(dir, 'host'));
      execFileSync('mkfifo', [join(dir, 'fifo')]);
      writeFileSync(join(dir, '.hidden'), '');
      const logs: string[] = [];
      assert.deepEqual(await createNetnsDir(dir).list((_l, m) => logs.push(m)), []);
      assert.equal(logs.length, 5, logs.join('\n'));
      assert.throws(() => createNetnsDir(dir).open('link'), /ELOOP|not a namespace file/);
      assert.throws(() => createNetnsDir(dir).open('plain'), /not a namespace file/);
      assert.throws(() => createNetnsDir(dir).open('../x'), /not a netns file name/);
      assert.deepEqual(await createNetnsDir(join(dir, 'missing')).list(() => {}), [], 'a missing directory holds nothing');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names: what runtimes and ip netns write, nothing with a separator or a leading dot', () => {
    for (const ok of ['cni-0b1f6c1e-5a3e-4c9a-8d4f-1e2a3b4c5d6e', '0b1f6c1e-5a3e-4c9a-8d4f-1e2a3b4c5d6e', 'ambpod-abc_1.x'])
      assert.ok(isNetnsFileName(ok), ok);
    for (const bad of ['', '.', '..', '.x', 'a/b', 'a\nb', 'a b', 'x'.repeat(256), '-x'])
      assert.ok(!isNetnsFileName(bad), JSON.stringify(bad));
  });
});
