import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { createAttachmentSaver, loadAttachments } from '../src/agent/attachmentStore.ts';
import type { VerifiableAttachment } from '../src/agent/podVerifier.ts';
import { captureLogger, tempDir } from './testHelpers.ts';

const web: VerifiableAttachment = {
  namespace: 'default',
  name: 'web',
  uid: 'uid-web',
  netns: '/var/run/netns/cni-1',
  mode: 'sidecar',
  netnsInode: 4026532345,
};
const gone: VerifiableAttachment = { ...web, name: 'gone', uid: 'uid-gone', netns: '/var/run/netns/cni-2' };

describe('tracked attachments across a restart', () => {
  it('are saved (0600) once after a burst of changes and loaded back, minus those whose netns is gone', async (t) => {
    const dir = await tempDir(t, 'attachments-');
    const path = join(dir, 'attachments.json');
    const current = new Map([
      ['c1/eth0', web],
      ['c2/eth0', gone],
    ]);
    const saver = createAttachmentSaver(path, () => current, captureLogger().logger, 60_000);
    saver.changed();
    saver.changed();
    await saver.flush();
    assert.equal(statSync(path).mode & 0o777, 0o600);
    assert.deepEqual(Object.keys(JSON.parse(readFileSync(path, 'utf8')) as object), ['c1/eth0', 'c2/eth0']);
    const loaded = loadAttachments(path, (netns) => netns === web.netns);
    assert.deepEqual([...loaded], [['c1/eth0', web]]);
  });

  it('an absent, corrupt or foreign file loads as nothing; malformed entries are skipped', async (t) => {
    const dir = await tempDir(t, 'attachments-');
    const path = join(dir, 'attachments.json');
    assert.equal(loadAttachments(path).size, 0);
    writeFileSync(path, '{not json');
    assert.equal(loadAttachments(path).size, 0);
    writeFileSync(path, JSON.stringify({ a: { ...web, mode: 'weird' }, b: { ...web, uid: 7 }, c: web }));
    assert.deepEqual([...loadAttachments(path, () => true)], [['c', web]]);
    // An inode that is not a positive integer is dropped (the entry stays, checked by address alone).
    const { netnsInode: _, ...withoutInode } = web;
    for (const bad of [-1, 1.5, '4026532345', null]) {
      writeFileSync(path, JSON.stringify({ c: { ...web, netnsInode: bad } }));
      assert.deepEqual([...loadAttachments(path, () => true)], [['c', withoutInode]], String(bad));
    }
  });
});
