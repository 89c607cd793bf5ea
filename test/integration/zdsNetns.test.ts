/**
 * ZDS with real pod network namespaces (root): the fds ztunnel receives — in the snapshot and in
 * live adds — are the pods' netns (same inode as `/var/run/netns/<name>`), and usable as such:
 * entering the netns through the received fd shows the address configured in that pod netns.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createZtunnelServer, type PodSnapshotEntry, type ZtunnelServer } from '@istio-cni/dataplane';
import { startFakeZtunnel, type FakeZtunnel } from '../support/fakeZtunnel.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { addNetns, type NamedNetns } from '../support/netns.ts';

const workload = (name: string) => ({ name, namespace: 'zds-test', serviceAccount: 'default' });

describe('ZDS passes real pod netns fds to ztunnel', { skip: kernelSkip, timeout: 60_000 }, () => {
  const pods: NamedNetns[] = [];
  const fds: number[] = [];
  const cache = new Map<string, PodSnapshotEntry>();
  let dir: string;
  let server: ZtunnelServer;
  let ztunnel: FakeZtunnel;

  const podNetns = (uid: string) => pods.find((p) => p.name.startsWith(uid));

  before(async () => {
    for (const [i, uid] of ['zds-a', 'zds-b', 'zds-c'].entries()) {
      const ns = addNetns(uid);
      pods.push(ns);
      execFileSync('ip', ['-n', ns.name, 'addr', 'add', `10.99.77.${i + 1}/32`, 'dev', 'lo']);
    }
    for (const ns of pods.slice(0, 2)) {
      const fd = openSync(ns.path, 'r');
      fds.push(fd);
      cache.set(ns.name.slice(0, 5), { workload: workload(ns.name), netnsFd: fd });
    }
    dir = mkdtempSync(join(tmpdir(), 'zds-root-'));
    server = createZtunnelServer({ path: join(dir, 'ztunnel.sock'), pods: { readCurrentPodSnapshot: () => new Map(cache) } });
    server.start();
    ztunnel = await startFakeZtunnel({ path: join(dir, 'ztunnel.sock'), expectedNetns: (uid) => podNetns(uid)?.path });
  });

  after(async () => {
    ztunnel?.close();
    await server?.close();
    for (const fd of fds) closeSync(fd);
    for (const ns of pods) ns.remove();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('snapshot fds have the inode of each pod netns', async () => {
    await ztunnel.waitFor(() => ztunnel.snapshots[0] === 1, 'snapshot');
    assert.deepEqual(ztunnel.fdProblems, []);
    assert.deepEqual(
      ztunnel.adds.map((a) => [a.uid, a.inode]),
      ['zds-a', 'zds-b'].map((uid) => [uid, statSync(podNetns(uid)?.path ?? '').ino]),
    );
  });

  it('a live add carries the new pod netns, and entering it through the fd shows its address', async () => {
    const ns = podNetns('zds-c');
    assert.ok(ns);
    const fd = openSync(ns.path, 'r');
    try {
      await server.podAdded('zds-c', workload(ns.name), fd);
    } finally {
      closeSync(fd);
    }
    assert.deepEqual(ztunnel.fdProblems, []);
    assert.equal(ztunnel.adds.at(-1)?.inode, statSync(ns.path).ino);
    const received = ztunnel.netnsFd('zds-c');
    assert.ok(received !== undefined);
    const addrs = execFileSync('nsenter', [`--net=/proc/${process.pid}/fd/${received}`, 'ip', '-o', 'addr', 'show', 'dev', 'lo'], {
      encoding: 'utf8',
    });
    assert.match(addrs, /10\.99\.77\.3\//);
    assert.doesNotMatch(addrs, /10\.99\.77\.1\//);
  });

  it('a delete reaches ztunnel, which lets go of the fd', async () => {
    await server.podDeleted('zds-a');
    assert.deepEqual(ztunnel.dels, ['zds-a']);
    assert.equal(ztunnel.netnsFd('zds-a'), undefined);
  });
});
