import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ProcFs } from '../src/ambient/procFs.ts';
import { scanProcesses } from '../src/ambient/procScan.ts';

const procFs: ProcFs = {
  readDir: async () => ['100', '9', 'self', 'uptime', '30', '4'],
  stat: async () => ({ ino: 1, dev: 1 }),
  readFile: async (path) => {
    if (path.startsWith('30/')) throw new Error(`ENOENT ${path}`);
    return path.startsWith('4/') ? '' : `${path.split('/')[0]}`;
  },
  openNetns: async () => {
    throw new Error('not used');
  },
};

test('scanProcesses: numeric entries in pid order; nothing found or a vanished process is skipped, logged', async () => {
  const logs: string[] = [];
  const seen: string[] = [];
  const read = async (pid: string) => {
    seen.push(pid);
    const text = await procFs.readFile(`${pid}/comm`);
    return text === '' ? undefined : Number(text);
  };
  const found: { pid: string; found: number }[] = [];
  for await (const entry of scanProcesses(procFs, read, (level, m) => logs.push(`${level}: ${m}`))) found.push(entry);
  assert.deepEqual(seen, ['4', '9', '30', '100']);
  assert.deepEqual(found, [
    { pid: '9', found: 9 },
    { pid: '100', found: 100 },
  ]);
  assert.deepEqual(logs, ['debug: pid 30: skipped: ENOENT 30/comm']);
});

test('scanProcesses: the caller may stop at the first find', async () => {
  const seen: string[] = [];
  const read = async (pid: string) => {
    seen.push(pid);
    return pid;
  };
  for await (const { pid } of scanProcesses(procFs, read)) {
    assert.equal(pid, '4');
    break;
  }
  assert.deepEqual(seen, ['4']);
});
