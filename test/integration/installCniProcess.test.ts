import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CNI_TESTDATA, daemonTestEnv as env, scratchHost, seedOrdered, waitFor } from '../../packages/install-cni/test/testHelpers.ts';

// The daemon run from source as a process (install-binaries checks its paths as the init container
// would, which needs root).
const NODE = resolve(import.meta.dirname, '../../node_modules/.bin/node');
const MAIN = resolve(import.meta.dirname, '../../packages/install-cni/src/main.ts');

describe('install-cni executable (from source)', () => {
  it('install-binaries copies the plugin and exits 0', async (t) => {
    const host = await scratchHost(t);
    const second = join(host.root, 'bin2');
    await mkdir(second);
    const { stdout } = await promisify(execFile)(NODE, [MAIN, 'install-binaries', '--cni-bin-target-dirs', `${host.binDir},${second}`], {
      env: { PATH: process.env.PATH ?? '', CNI_BIN_SOURCE_DIR: join(CNI_TESTDATA, 'bindir') },
    });
    assert.match(stdout, /installed binaries/);
    for (const d of [host.binDir, second]) for (const n of ['istio-cni', 'istio-iptables']) assert.ok(existsSync(join(d, n)));
  });

  it('invalid settings stop start-up naming the setting', async () => {
    await assert.rejects(
      promisify(execFile)(NODE, [MAIN], { env: { PATH: process.env.PATH ?? '', MONITORING_PORT: 'many' } }),
      (err: { code?: number; stdout?: string }) => {
        assert.equal(err.code, 1);
        assert.match(err.stdout ?? '', /invalid MONITORING_PORT \\"many\\"/);
        return true;
      },
    );
  });

  it('SIGTERM with the upgrade check off shuts down cleanly and restores the node', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['minikube_cni.conf']);
    // The test API is unreachable, which the upgrade check would answer by keeping the plugin.
    const settings = env(host, { MONITORING_PORT: '0', AMBIENT_DISABLE_SAFE_UPGRADE: 'true' });
    const child = execFile(NODE, [MAIN], { env: { PATH: process.env.PATH ?? '', ...settings } });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    t.after(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    await waitFor('installed', () => existsSync(join(host.netDir, '00-minikube_cni.conflist')) || undefined);
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
    assert.deepEqual(
      await readFile(join(host.netDir, '00-minikube_cni.conf'), 'utf8'),
      await readFile(join(CNI_TESTDATA, 'pre/minikube_cni.conf'), 'utf8'),
    );
    assert.equal(existsSync(join(host.netDir, '00-minikube_cni.conflist')), false);
  });
});
