/**
 * The built `dist/istio-cni` writes its result with write(2) (packages/istio-cni/src/stdio.ts): a
 * result larger than a pipe holds reaches a reader that starts late, whole, whether the runtime's
 * pipe is blocking (libcni's) or non-blocking (where a write fails with EAGAIN and the rest goes
 * through the runtime's stream).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PLUGIN } from '../support/daemonProcess.ts';

/** A pod in an excluded namespace: the plugin passes prevResult through without asking anyone. */
const ENV = {
  PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/none',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=big-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee',
};

/** A prevResult of ~1 MiB: 16 pipe buffers' worth. */
function bigConf(runDir: string): { stdin: string; prevResult: Record<string, unknown> } {
  const routes = Array.from({ length: 20_000 }, (_, i) => ({ dst: `10.${(i >> 8) & 255}.${i & 255}.0/24`, gw: '10.0.0.1' }));
  const prevResult = {
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eth0' }],
    ips: [{ address: '10.1.0.5/24', interface: 0 }],
    routes,
    dns: {},
  };
  const conf = {
    cniVersion: '1.0.0',
    name: 'k8s-pod-network',
    type: 'istio-cni',
    cni_agent_run_dir: runDir,
    exclude_namespaces: ['kube-system'],
    pod_namespace: 'istio-system',
    prevResult,
  };
  return { stdin: JSON.stringify(conf), prevResult };
}

/**
 * Node's pipe to a child's stdout is a blocking one; its own stdout, once used on a pipe, is
 * non-blocking (libuv sets O_NONBLOCK on the shared description), and process.execve keeps it.
 */
const NON_BLOCKING_WRAPPER = "process.stdout.write(''); process.execve(process.argv[1], [process.argv[1]], process.env);";

describe('plugin stdout to a slow reader', () => {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-stdout-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const { stdin, prevResult } = bigConf(join(dir, 'run'));

  for (const nonBlocking of [false, true]) {
    it(`a ~1 MiB result reaches a reader that starts 1 s late, ${nonBlocking ? 'non-blocking' : 'blocking'} pipe`, async () => {
      const argv = nonBlocking ? [process.execPath, '-e', NON_BLOCKING_WRAPPER, PLUGIN] : [PLUGIN];
      const child = spawn(argv[0] as string, argv.slice(1), { env: ENV, cwd: '/', stdio: ['pipe', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const closed = new Promise<number | null>((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (code) => resolve(code));
      });
      child.stdin.end(stdin);
      child.stdout.pause();
      await sleep(1000);
      const chunks: Buffer[] = [];
      child.stdout.on('data', (c: Buffer) => chunks.push(c));
      child.stdout.resume();
      const code = await closed;
      const text = Buffer.concat(chunks).toString();
      assert.equal(code, 0, stderr);
      assert.ok(text.length > 1024 * 1024, `stdout ${text.length} bytes`);
      assert.deepEqual(JSON.parse(text), prevResult);
    });
  }
});
