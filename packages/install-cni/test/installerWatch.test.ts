import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, symlink, writeFile, copyFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { copyBinaries, VERIFIED_COPIES_FILE } from '../src/installer/copyBinaries.ts';
import { buildKubeconfig, writeKubeconfig } from '../src/installer/kubeconfig.ts';
import { Installer } from '../src/installer/installer.ts';
import { atomicWrite } from '../src/installer/atomicWrite.ts';
import { writeCniConfig } from '../src/installer/writeCniConfig.ts';
import { insertCniConfig, removeIstioEntry } from '../src/installer/insertCniConfig.ts';
import { checkValidCniConfig } from '../src/installer/checkValidCniConfig.ts';
import { buildPluginConfig } from '@istio-cni/handoff';
import {
  INSTALL_TESTDATA,
  CNI_TESTDATA,
  captureLogger,
  cniSettings,
  cniTestSettings,
  hostForRun,
  scratchHost,
  seedOrdered,
  tempDir,
  waitFor,
} from './testHelpers.ts';

const golden = (name: string) => readFile(join(INSTALL_TESTDATA, name), 'utf8');

describe('kubeconfig (inputs.md §5.8)', () => {
  const base = {
    k8sServiceProtocol: '',
    k8sServicePort: '443',
    kubeCaFile: join(INSTALL_TESTDATA, 'kube-ca.crt'),
    skipTlsVerify: false,
    mode: 0o600,
  };
  async function setup(t: Parameters<typeof tempDir>[0]) {
    const dir = await tempDir(t);
    await writeFile(join(dir, 'token'), 'service_account_token_string');
    return { dir, tokenFile: join(dir, 'token'), path: join(dir, 'kubeconfig') };
  }
  it('k8s service host not set', async (t) => {
    const s = await setup(t);
    await assert.rejects(writeKubeconfig({ ...base, ...s, k8sServiceHost: '' }), /KUBERNETES_SERVICE_HOST not set/);
  });
  it('k8s service port not set', async (t) => {
    const s = await setup(t);
    await assert.rejects(
      writeKubeconfig({ ...base, ...s, k8sServiceHost: '10.96.0.1', k8sServicePort: '' }),
      /KUBERNETES_SERVICE_PORT not set/,
    );
  });
  it('skip TLS verify', async (t) => {
    const s = await setup(t);
    await writeKubeconfig({ ...base, ...s, k8sServiceHost: '10.96.0.1', skipTlsVerify: true });
    assert.equal((await readFile(s.path, 'utf8')).trim(), (await golden('kubeconfig-skip-tls')).trim());
  });
  it('TLS verify', async (t) => {
    const s = await setup(t);
    await writeKubeconfig({ ...base, ...s, k8sServiceHost: '10.96.0.1' });
    assert.equal((await readFile(s.path, 'utf8')).trim(), (await golden('kubeconfig-tls')).trim());
    assert.equal((await stat(s.path)).mode & 0o777, 0o600);
  });
  it('creates the run dir it writes into (the first pass starts before the servers make it)', async (t) => {
    const s = await setup(t);
    const path = join(s.dir, 'var/run/istio-cni/istio-cni-kubeconfig');
    assert.equal(await writeKubeconfig({ ...base, ...s, path, k8sServiceHost: '10.96.0.1' }), true);
    assert.equal((await readFile(path, 'utf8')).trim(), (await golden('kubeconfig-tls')).trim());
    assert.equal((await stat(join(s.dir, 'var/run/istio-cni'))).mode & 0o777, 0o750);
  });
  it('replace: host change rewrites, same input does not', async (t) => {
    const s = await setup(t);
    assert.equal(await writeKubeconfig({ ...base, ...s, k8sServiceHost: '10.96.0.1' }), true);
    assert.equal(await writeKubeconfig({ ...base, ...s, k8sServiceHost: '10.96.0.1' }), false);
    assert.equal(await writeKubeconfig({ ...base, ...s, k8sServiceHost: '50.76.2.1' }), true);
    assert.equal((await readFile(s.path, 'utf8')).trim(), (await golden('kubeconfig-newhost')).trim());
  });
  it('brackets an IPv6 host', () => {
    const text = buildKubeconfig({
      k8sServiceProtocol: 'https',
      k8sServiceHost: 'fd00::1',
      k8sServicePort: '443',
      skipTlsVerify: true,
      token: 't',
    });
    assert.match(text, /server: https:\/\/\[fd00::1\]:443\n/);
  });
});

describe('copyBinaries', () => {
  it('copies atomically with the source mode, removes stale temp files, skips identical targets', async (t) => {
    const src = await tempDir(t);
    const dst = await tempDir(t);
    await writeFile(join(src, 'istio-cni'), 'plugin-v1', { mode: 0o755 });
    await writeFile(join(dst, 'istio-cni.tmp.abc123'), 'partial');
    const stats = { bytesWritten: 0, filesWritten: [] as string[] };
    assert.deepEqual([...(await copyBinaries({ sourceDir: src, targetDirs: [dst], stats }))], ['istio-cni']);
    assert.equal(await readFile(join(dst, 'istio-cni'), 'utf8'), 'plugin-v1');
    assert.equal((await stat(join(dst, 'istio-cni'))).mode & 0o777, 0o755);
    assert.deepEqual(await readdir(dst), ['istio-cni']);
    assert.equal(stats.bytesWritten, 9);
    const again = { bytesWritten: 0, filesWritten: [] as string[] };
    await copyBinaries({ sourceDir: src, targetDirs: [dst], stats: again });
    assert.equal(again.bytesWritten, 0, 'identical binary is not rewritten');
    await writeFile(join(src, 'istio-cni'), 'plugin-v2');
    await copyBinaries({ sourceDir: src, targetDirs: [dst], stats: again });
    assert.equal(await readFile(join(dst, 'istio-cni'), 'utf8'), 'plugin-v2');
  });
});

async function startInstaller(t: Parameters<typeof tempDir>[0], seeded = ['calico.conflist'], owned = false) {
  const { host, controller, run } = await hostForRun(t);
  // Owned: the primary at a usual priority (10-), after the owned 02-istio-cni.conflist.
  await seedOrdered(host.netDir, seeded, owned ? 10 : 0);
  const log = captureLogger();
  const plain = cniTestSettings(host);
  const settings = owned ? { ...plain, cni: { ...plain.cni, owned: true } } : plain;
  const installer = new Installer({ settings, logger: log.logger, throttle: { maxDelayMs: 20 } });
  const running = run(installer);
  await waitFor('ready', () => installer.ready || undefined);
  return { host, installer, controller, running, log, settings };
}

/** kubelet's projected-volume update: new timestamped dir, `..data` symlink swapped atomically. */
async function kubeletSwap(saDir: string, files: Record<string, string>, generation: number): Promise<void> {
  const dataDir = join(saDir, `..2026_01_01_00_00_0${generation}`);
  await mkdir(dataDir);
  for (const [name, content] of Object.entries(files)) await writeFile(join(dataDir, name), content);
  await symlink(`..2026_01_01_00_00_0${generation}`, join(saDir, '..data_tmp'));
  await rename(join(saDir, '..data_tmp'), join(saDir, '..data'));
}

describe('installer watch loop', () => {
  it('a pass over an unchanged node writes 0 bytes', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    const first = await installer.installAll();
    assert.ok(first.bytesWritten > 0);
    const second = await installer.installAll();
    assert.deepEqual(second, { bytesWritten: 0, filesWritten: [] });
    // A fresh installer (daemon restart) over the installed node writes nothing either.
    const restarted = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    assert.deepEqual(await restarted.installAll(), { bytesWritten: 0, filesWritten: [] });
  });

  it('a restart trusts the verified copies of the last run, and re-reads a target rewritten since', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const events = (lines: Record<string, unknown>[]) => lines.map((l) => l.msg).filter((m) => typeof m === 'string' && /binary/.test(m));
    await new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger }).installAll();
    assert.ok(existsSync(join(host.runDir, VERIFIED_COPIES_FILE)));

    // A save cut short by a kill leaves a temp file; the next run removes it.
    const staleTemp = join(host.runDir, `${VERIFIED_COPIES_FILE}.tmp.0123456789ab`);
    await writeFile(staleTemp, '{"torn');
    const restart = captureLogger();
    assert.deepEqual(await new Installer({ settings: cniTestSettings(host), logger: restart.logger }).installAll(), {
      bytesWritten: 0,
      filesWritten: [],
    });
    assert.equal(existsSync(staleTemp), false, 'stale temp file of the record removed');
    assert.ok(events(restart.lines).length > 0);
    assert.ok(
      events(restart.lines).every((m) => m === 'binary unchanged since verified'),
      JSON.stringify(events(restart.lines)),
    );

    // Same size, same bytes even: a rewrite is a new file version, so it is compared again.
    const plugin = join(host.binDir, 'istio-cni');
    await writeFile(plugin, await readFile(plugin));
    const afterRewrite = captureLogger();
    await new Installer({ settings: cniTestSettings(host), logger: afterRewrite.logger }).installAll();
    assert.ok(events(afterRewrite.lines).includes('binary verified equal by content'), JSON.stringify(events(afterRewrite.lines)));

    // Different bytes of the same size: copied back.
    const original = await readFile(plugin);
    await writeFile(plugin, Buffer.alloc(original.length, 0x5a));
    await new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger }).installAll();
    assert.deepEqual(await readFile(plugin), original);

    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    await installer.installAll();
    await installer.cleanup();
    assert.equal(existsSync(join(host.runDir, VERIFIED_COPIES_FILE)), false);
  });

  it('rewrites the kubeconfig when kubelet rotates the token via a ..data symlink swap', async (t) => {
    const { host, controller, run } = await hostForRun(t);
    // Projected-volume layout: files are symlinks through ..data.
    const token = await readFile(join(host.saDir, 'token'), 'utf8');
    const ca = await readFile(join(host.saDir, 'ca.crt'), 'utf8');
    for (const f of ['token', 'ca.crt', 'namespace']) await (await import('node:fs/promises')).rm(join(host.saDir, f));
    await kubeletSwap(host.saDir, { token, 'ca.crt': ca, namespace: 'kube-system' }, 1);
    for (const f of ['token', 'ca.crt', 'namespace']) await symlink(`..data/${f}`, join(host.saDir, f));
    await seedOrdered(host.netDir, ['calico.conflist']);
    const log = captureLogger();
    const installer = new Installer({ settings: cniTestSettings(host), logger: log.logger, throttle: { maxDelayMs: 20 } });
    const running = run(installer);
    await waitFor('ready', () => installer.ready || undefined);
    assert.match(await readFile(installer.kubeconfigPath, 'utf8'), new RegExp(`token: ${token.slice(0, 20)}`));
    await kubeletSwap(host.saDir, { token: 'rotated-token', 'ca.crt': ca, namespace: 'kube-system' }, 2);
    await waitFor(
      'rotated token in kubeconfig',
      async () => ((await readFile(installer.kubeconfigPath, 'utf8')).includes('token: rotated-token') ? true : undefined),
      5000,
    );
    await waitFor('ready again', () => installer.ready || undefined);
    controller.abort();
    await running;
  });

  it('rewrites the kubeconfig when the CA changes', async (t) => {
    const { host, installer } = await startInstaller(t);
    await atomicWrite(join(host.saDir, 'ca.crt'), await readFile(join(INSTALL_TESTDATA, 'kube-ca.crt')), 0o644);
    const want = (await readFile(join(INSTALL_TESTDATA, 'kube-ca.crt'))).toString('base64');
    await waitFor('new CA', async () => ((await readFile(installer.kubeconfigPath, 'utf8')).includes(want) ? true : undefined));
  });

  it('a service host change rewrites the kubeconfig on the next pass', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    await new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger }).installAll();
    const moved = { ...cniTestSettings(host), k8sServiceHost: '50.76.2.1' };
    const stats = await new Installer({ settings: moved, logger: captureLogger().logger }).installAll();
    assert.deepEqual(stats.filesWritten, [join(host.runDir, 'istio-cni-kubeconfig')]);
    assert.match(await readFile(join(host.runDir, 'istio-cni-kubeconfig'), 'utf8'), /server: https:\/\/50\.76\.2\.1:443/);
  });

  it('re-copies a deleted binary', async (t) => {
    const { host } = await startInstaller(t);
    await (await import('node:fs/promises')).rm(join(host.binDir, 'istio-cni'));
    await waitFor('binary back', () => existsSync(join(host.binDir, 'istio-cni')) || undefined);
  });

  it('wins a config fight: 100 rewrites without our entry, valid JSON at every read, throttle warning logged', async (t) => {
    const { host, installer, log } = await startInstaller(t);
    const path = join(host.netDir, '00-calico.conflist');
    const clean = await readFile(join(CNI_TESTDATA, 'pre/calico.conflist'), 'utf8');
    const expected = await readFile(join(CNI_TESTDATA, 'expected/10-calico.conflist-istioconfig'), 'utf8');
    let reads = 0;
    for (let i = 0; i < 100; i++) {
      await atomicWrite(path, clean, 0o644);
      await waitFor(`entry back after rewrite ${i}`, async () => {
        const text = await readFile(path, 'utf8');
        JSON.parse(text); // throws on a torn file
        reads++;
        return text === expected ? true : undefined;
      });
    }
    assert.ok(reads >= 100);
    assert.ok(
      log.lines.some((l) => l.level === 'warn' && String(l.msg).includes('conflicting component')),
      'throttle warning logged',
    );
    await waitFor('ready after the fight', () => installer.ready || undefined);
    assert.equal(removeIstioEntry(await readFile(path, 'utf8')), clean);
  });
});

describe('Istio-owned CNI config', () => {
  const withMtu = (conf: { plugins: Record<string, unknown>[] }, mtu: number) =>
    `${JSON.stringify({ ...conf, plugins: conf.plugins.map((p, j) => (j === 0 ? { ...p, mtu } : p)) }, null, 2)}\n`;
  const cleanCalico = async () =>
    JSON.parse(await readFile(join(CNI_TESTDATA, 'pre/calico.conflist'), 'utf8')) as { plugins: Record<string, unknown>[] };

  it('a primary rewriting its own conflist with a changed setting: the owned file follows it, the primary is never touched', async (t) => {
    const { host, installer, settings } = await startInstaller(t, ['calico.conflist'], true);
    const primaryPath = join(host.netDir, '10-calico.conflist');
    const ownedPath = join(host.netDir, settings.cni.ownedFilename);
    const clean = await cleanCalico();
    const mirrored = (text: string) => insertCniConfig(buildPluginConfig(settings.cni.plugin), text);
    for (let i = 0; i < 5; i++) {
      const primary = withMtu(clean, 1400 + i);
      await atomicWrite(primaryPath, primary, 0o644);
      await waitFor(`the owned file mirroring rewrite ${i}`, async () =>
        (await readFile(ownedPath, 'utf8')) === mirrored(primary) ? true : undefined,
      );
      assert.equal(await readFile(primaryPath, 'utf8'), primary, 'the primary is left as its owner wrote it');
    }
    await waitFor('ready after the rewrites', () => installer.ready || undefined);
    assert.deepEqual((await readdir(host.netDir)).filter((n) => n.endsWith('.conflist')).sort(), [
      '02-istio-cni.conflist',
      '10-calico.conflist',
    ]);
  });

  it('switched from chained mode: the entry left in the primary goes once the owned file is in place, and an uninstall leaves no istio-cni', async (t) => {
    const host = await scratchHost(t);
    const primaryPath = join(host.netDir, '10-calico.conflist');
    // What a chained-mode agent leaves through an upgrade: its entry in the primary.
    const chained = await readFile(join(CNI_TESTDATA, 'expected/10-calico.conflist-istioconfig'), 'utf8');
    await writeFile(primaryPath, chained, { mode: 0o644 });
    const plain = cniTestSettings(host);
    const settings = { ...plain, cni: { ...plain.cni, owned: true } };
    const log = captureLogger();
    const installer = new Installer({ settings, logger: log.logger });
    await installer.installAll();
    const ownedPath = join(host.netDir, settings.cni.ownedFilename);
    assert.equal(await readFile(primaryPath, 'utf8'), removeIstioEntry(chained));
    assert.equal((await stat(primaryPath)).mode & 0o777, 0o644);
    assert.equal(await readFile(ownedPath, 'utf8'), insertCniConfig(buildPluginConfig(settings.cni.plugin), chained));
    assert.ok(log.lines.some((l) => l.msg === 'removed a leftover istio-cni entry from the primary CNI config' && l.path === primaryPath));
    assert.deepEqual(await installer.installAll(), { bytesWritten: 0, filesWritten: [] }, 'a second pass finds nothing to do');
    const report = await installer.cleanup();
    assert.deepEqual(report.binaryKeptFor, []);
    assert.ok(report.binariesRemoved.length > 0);
    assert.deepEqual(await readdir(host.netDir), ['10-calico.conflist']);
    assert.equal(await readFile(primaryPath, 'utf8'), removeIstioEntry(chained));
  });

  it('an owned file the primary changed under (same plugin types, another setting) is invalid', async (t) => {
    const dir = await tempDir(t);
    const clean = await cleanCalico();
    const settings = cniSettings(dir, { owned: true });
    await writeFile(join(dir, '10-calico.conflist'), withMtu(clean, 1400));
    const record = await writeCniConfig(settings, { primaryName: '' });
    const state = { configPath: record.path, primaryName: '' };
    assert.equal(await checkValidCniConfig(settings, state), undefined);
    assert.equal(state.primaryName, '10-calico.conflist');
    await writeFile(join(dir, '10-calico.conflist'), withMtu(clean, 9000));
    assert.match((await checkValidCniConfig(settings, state)) ?? 'valid', /no longer mirrors .*10-calico\.conflist/);
  });
});

describe('shutdown', () => {
  it('a shutdown that arrives while the config is being checked ends the watch loop', async (t) => {
    const { host, controller, run } = await hostForRun(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    // installResult('SUCCESS') runs after the validity check and before the loop waits for
    // events: aborting there is the window in which a SIGTERM was once lost (the daemon hung).
    const installer = new Installer({
      settings: cniTestSettings(host),
      logger: captureLogger().logger,
      throttle: { maxDelayMs: 20 },
      metrics: {
        installResult: () => controller.abort(),
        setInstallReady: () => {},
      },
    });
    const running = run(installer);
    const outcome = await Promise.race([
      running.then(() => 'returned'),
      new Promise((r) => setTimeout(() => r('still waiting'), 5_000).unref()),
    ]);
    assert.equal(outcome, 'returned');
  });
});

describe('half-written primary config', () => {
  it('waits for a named file another writer is still filling instead of failing the pass', async (t) => {
    const { host, run } = await hostForRun(t);
    const name = '00-minikube_cni.conf';
    await writeFile(join(host.netDir, name), '{"cniVersion": "0.3.1", "na'); // torn: the writer is not done
    const log = captureLogger();
    const installer = new Installer({
      settings: cniTestSettings(host, { confName: name }),
      logger: log.logger,
      throttle: { maxDelayMs: 20 },
    });
    let failed: unknown;
    run(installer).catch((err: unknown) => (failed = err));
    // The installer has seen the torn file and waits, rather than failing the pass.
    await waitFor(
      'the installer waiting for complete JSON',
      () => failed ?? log.lines.find((l) => String(l.msg).includes('not complete JSON')),
    );
    assert.equal(failed, undefined);
    await copyFile(join(CNI_TESTDATA, 'pre/minikube_cni.conf'), join(host.netDir, name));
    await waitFor('installed', () => installer.ready || undefined);
    assert.match(await readFile(join(host.netDir, '00-minikube_cni.conflist'), 'utf8'), /"type": "istio-cni"/);
  });
});
