/**
 * Both executables show their own names in the process table: /proc/<pid>/comm (what ps, top and
 * pgrep -x match) and /proc/<pid>/cmdline. Node.js names its main thread "MainThread", which on
 * Linux is the process's name; the executables' loader (scripts/sea/codeCacheLoader.cjs) renames it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { DAEMON, PLUGIN, makeHostRoot, startDaemon } from '../support/daemonProcess.ts';

function comm(pid: number): string {
  return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
}

function cmdline(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1);
}

function pgrepExact(name: string): number[] {
  try {
    return execFileSync('pgrep', ['-x', name], { encoding: 'utf8' }).trim().split('\n').map(Number);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

describe('process names of the built executables', () => {
  it('the daemon is install-cni in comm, cmdline and pgrep -x', async () => {
    const root = makeHostRoot();
    // Started (and ready) means the loader and the daemon's start-up have run.
    const daemon = await startDaemon(root, {}, true, ['--log_as_json']);
    try {
      const pid = daemon.child.pid;
      assert.ok(pid);
      assert.equal(comm(pid), 'install-cni');
      assert.deepEqual(cmdline(pid), [DAEMON, '--log_as_json']);
      assert.ok(pgrepExact('install-cni').includes(pid), `pgrep -x install-cni does not list ${pid}`);
    } finally {
      await daemon.stop();
      root.remove();
    }
  });

  it('the plugin is istio-cni while it runs', async () => {
    // The plugin reads its netconf from stdin: held open, it waits in read(0) with its code running.
    const child = spawn(PLUGIN, [], {
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', CNI_COMMAND: 'VERSION' },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    try {
      const pid = child.pid;
      assert.ok(pid);
      // /proc/<pid>/syscall: the syscall number (0 = read) and its first argument (the fd).
      for (let i = 0; !/^0 0x0 /.test(readFileSync(`/proc/${pid}/syscall`, 'utf8')); i++) {
        assert.ok(i < 1000 && child.exitCode === null, 'the plugin never blocked reading its netconf from stdin');
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(comm(pid), 'istio-cni');
      assert.deepEqual(cmdline(pid), [PLUGIN]);
      assert.ok(pgrepExact('istio-cni').includes(pid), `pgrep -x istio-cni does not list ${pid}`);
    } finally {
      child.stdin.end('{"cniVersion":"1.0.0"}');
    }
    assert.equal(await exited, 0);
    assert.match(stdout, /supportedVersions/);
  });
});
