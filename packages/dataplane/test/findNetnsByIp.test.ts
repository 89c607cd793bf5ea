import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createNetnsHandle, findNetnsByIp, type NetnsHandle, type ProcFs } from '@istio-cni/dataplane';

interface FakeProc {
  pid: number;
  netns: number;
  start: number;
}

/** A procfs with processes in namespaces; netns 1 is the host's. Addresses live per netns inode. */
function fakeProcFs(procs: FakeProc[], opts: { vanish?: number[]; selfNetns?: number; pid1Hidden?: boolean } = {}) {
  const opened: NetnsHandle[] = [];
  const released: number[] = [];
  const byPid = new Map(procs.map((p) => [String(p.pid), p]));
  const get = (path: string) => {
    const pid = path.split('/')[0] ?? '';
    const p = byPid.get(pid);
    if (!p || opts.vanish?.includes(p.pid)) throw new Error(`ENOENT: ${path}`);
    return p;
  };
  const procFs: ProcFs = {
    async readDir() {
      return [...procs.map((p) => String(p.pid)), 'self', 'uptime'];
    },
    async stat(path) {
      if (path === 'self/ns/net') return { ino: opts.selfNetns ?? 1, dev: 4 };
      if (path.startsWith('1/') && opts.pid1Hidden) throw new Error(`EACCES: permission denied, stat '/proc/${path}'`);
      return { ino: get(path).netns, dev: 4 };
    },
    async readFile(path) {
      const p = get(path);
      return `${p.pid} (sleep me) S 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 ${p.start} 1000 10 0`;
    },
    async openNetns(path, options) {
      const p = get(path);
      const h = createNetnsHandle({
        fd: 100 + p.pid,
        inode: p.netns,
        source: `/host/proc/${path}`,
        release: (fd) => released.push(fd),
        ...options,
      });
      opened.push(h);
      return h;
    },
  };
  return { procFs, opened, released };
}

const addresses: Record<number, string[]> = {
  1: ['10.0.0.1'],
  20: ['127.0.0.1', '10.1.1.5'],
  30: ['127.0.0.1', '10.1.1.6'],
  40: ['10.1.1.5'],
};
const checkOwnership = async (netns: NetnsHandle, ips: readonly string[]) => (addresses[netns.inode] ?? []).some((a) => ips.includes(a));

describe('findNetnsByIp', () => {
  it('finds the netns holding the IP, skips the host netns, and leaves only the result open', async () => {
    const fs = fakeProcFs([
      { pid: 1, netns: 1, start: 1 },
      { pid: 200, netns: 20, start: 500 },
      { pid: 201, netns: 20, start: 400 },
      { pid: 300, netns: 30, start: 100 },
    ]);
    const found = await findNetnsByIp({ procFs: fs.procFs, checkOwnership }, '10.1.1.5');
    assert.equal(found?.inode, 20);
    assert.equal(found?.ownerStartTime, 400, 'the oldest process of that netns');
    assert.equal(fs.opened.length, 2, 'each non-host netns is entered once');
    assert.deepEqual(
      fs.opened.filter((h) => !h.closed).map((h) => h.inode),
      [20],
    );
  });

  it('when two namespaces hold the address, the oldest process wins', async () => {
    const fs = fakeProcFs([
      { pid: 1, netns: 1, start: 1 },
      { pid: 200, netns: 20, start: 900 },
      { pid: 400, netns: 40, start: 50 },
    ]);
    const found = await findNetnsByIp({ procFs: fs.procFs, checkOwnership }, '10.1.1.5');
    assert.equal(found?.inode, 40);
    assert.deepEqual(
      fs.opened.filter((h) => !h.closed).map((h) => h.inode),
      [40],
    );
  });

  it('never returns the host netns, even when it holds the address', async () => {
    const fs = fakeProcFs([
      { pid: 1, netns: 1, start: 1 },
      { pid: 2, netns: 1, start: 2 },
    ]);
    assert.equal(await findNetnsByIp({ procFs: fs.procFs, checkOwnership }, '10.0.0.1'), undefined);
    assert.equal(fs.opened.length, 0);
  });

  it("when pid 1 cannot be inspected, the daemon's own netns is skipped instead", async () => {
    const fs = fakeProcFs(
      [
        { pid: 1, netns: 1, start: 1 },
        { pid: 50, netns: 1, start: 3 },
        { pid: 300, netns: 30, start: 6 },
      ],
      { pid1Hidden: true, selfNetns: 1 },
    );
    const warnings: string[] = [];
    assert.equal(
      await findNetnsByIp({ procFs: fs.procFs, checkOwnership, log: (level, m) => level === 'warn' && warnings.push(m) }, '10.0.0.1'),
      undefined,
    );
    assert.equal(fs.opened.length, 1, 'only netns 30 was entered');
    assert.match(warnings[0] ?? '', /cannot inspect the host netns through pid 1/);
    assert.equal((await findNetnsByIp({ procFs: fs.procFs, checkOwnership }, '10.1.1.6'))?.inode, 30);
  });

  it('processes that vanish during the scan and namespaces that cannot be checked are skipped', async () => {
    const fs = fakeProcFs(
      [
        { pid: 1, netns: 1, start: 1 },
        { pid: 200, netns: 20, start: 5 },
        { pid: 300, netns: 30, start: 6 },
      ],
      { vanish: [200] },
    );
    const failing = async (netns: NetnsHandle, ips: readonly string[]) => {
      if (netns.inode === 20) throw new Error('nsenter failed');
      return checkOwnership(netns, ips);
    };
    const found = await findNetnsByIp({ procFs: fs.procFs, checkOwnership: failing }, '10.1.1.6');
    assert.equal(found?.inode, 30);
  });

  it('a bad IP is an error naming it', async () => {
    const fs = fakeProcFs([{ pid: 1, netns: 1, start: 1 }]);
    await assert.rejects(findNetnsByIp({ procFs: fs.procFs, checkOwnership }, '10.1.1'), /invalid pod IP "10.1.1"/);
  });
});
