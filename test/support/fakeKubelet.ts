import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FakeKubelet {
  uid: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * A process the agent's procfs scan takes for the kubelet (comm `kubelet`, "kubelet" in its
 * command line: a copy of `sleep` named so), running as `uid`. The nft host probe rule matches
 * the kubelet's socket owner, so probes must come from this uid.
 */
export async function startFakeKubelet(uid: number): Promise<FakeKubelet> {
  const dir = mkdtempSync(join(tmpdir(), 'fake-kubelet-'));
  chmodSync(dir, 0o755);
  const bin = join(dir, 'kubelet');
  copyFileSync('/bin/sleep', bin);
  chmodSync(bin, 0o755);
  const child = spawn(bin, ['86400'], { uid, gid: uid, stdio: 'ignore' });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', () => resolve());
    child.once('error', reject);
  });
  return {
    uid,
    process: child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
