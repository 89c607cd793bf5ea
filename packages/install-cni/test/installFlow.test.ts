import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { copyFile, readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { removeIstioEntry } from '../src/installer/insertCniConfig.ts';
import { Installer } from '../src/installer/installer.ts';
import { atomicWrite } from '../src/installer/atomicWrite.ts';
import { CNI_TESTDATA, captureLogger, cniTestSettings, hostForRun, scratchHost, seedOrdered, waitFor } from './testHelpers.ts';

const CALICO = 'expected/10-calico.conflist-istioconfig';
const CALICO_CLEAN = 'pre/calico.conflist';
const MINIKUBE = 'expected/minikube_cni.conflist.expected';
const MINIKUBE_CLEAN = 'expected/minikube_cni.conflist.clean';
const STANDALONE = 'expected/YYY-istio-cni.conf';

interface FlowCase {
  name: string;
  chained: boolean;
  confName: string;
  seeded: string[];
  delayed?: string;
  result: string;
  expected: string;
  clean?: string;
}

const CASES: FlowCase[] = [
  {
    name: 'File with pre-plugins--.conflist',
    chained: true,
    confName: '00-calico.conflist',
    seeded: ['calico.conflist'],
    result: '00-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'File without pre-plugins--.conf',
    chained: true,
    confName: '00-minikube_cni.conf',
    seeded: ['minikube_cni.conf'],
    result: '00-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'First file with pre-plugins--.conflist',
    chained: true,
    confName: '',
    seeded: ['calico.conflist', 'minikube_cni.conf'],
    result: '00-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'First file without pre-plugins--.conf',
    chained: true,
    confName: '',
    seeded: ['minikube_cni.conf', 'calico.conflist'],
    result: '00-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'Skip non-json file for first valid .conf file',
    chained: true,
    confName: '',
    seeded: ['non_json.conf', 'minikube_cni.conf', 'calico.conflist'],
    result: '01-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'Skip non-json file for first valid .conflist file',
    chained: true,
    confName: '',
    seeded: ['non_json.conf', 'calico.conflist', 'minikube_cni.conf'],
    result: '01-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'Skip invalid .conf file for first valid .conf file',
    chained: true,
    confName: '',
    seeded: ['bad_minikube_cni.conf', 'minikube_cni.conf', 'calico.conflist'],
    result: '01-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'Skip invalid .conf file for first valid .conflist file',
    chained: true,
    confName: '',
    seeded: ['bad_minikube_cni.conf', 'calico.conflist', 'minikube_cni.conf'],
    result: '01-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'Skip invalid .conflist files for first valid .conf file',
    chained: true,
    confName: '',
    seeded: ['noname_calico.conflist', 'noplugins_calico.conflist', 'minikube_cni.conf', 'calico.conflist'],
    result: '02-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'Skip invalid .conflist files for first valid .conflist file',
    chained: true,
    confName: '',
    seeded: ['noname_calico.conflist', 'noplugins_calico.conflist', 'calico.conflist', 'minikube_cni.conf'],
    result: '02-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'confFile env var point to missing .conf with valid .conflist file',
    chained: true,
    confName: '00-calico.conf',
    seeded: ['calico.conflist'],
    result: '00-calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'confFile env var point to missing .conflist with valid .conf file',
    chained: true,
    confName: '00-minikube_cni.conflist',
    seeded: ['minikube_cni.conf'],
    result: '00-minikube_cni.conflist',
    expected: MINIKUBE,
    clean: MINIKUBE_CLEAN,
  },
  {
    name: 'confFile env var point to missing file initially and ignore different conf',
    chained: true,
    confName: 'missing_initially.conf',
    seeded: [],
    delayed: 'calico.conflist',
    result: 'missing_initially.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  {
    name: 'confFile env var not specified and no valid conf file initially',
    chained: true,
    confName: '',
    seeded: [],
    delayed: 'calico.conflist',
    result: 'calico.conflist',
    expected: CALICO,
    clean: CALICO_CLEAN,
  },
  { name: 'standalone plugin default name', chained: false, confName: '', seeded: [], result: 'YYY-istio-cni.conf', expected: STANDALONE },
  {
    name: 'standalone plugin user defined name',
    chained: false,
    confName: 'user-defined.conf',
    seeded: [],
    result: 'user-defined.conf',
    expected: STANDALONE,
  },
];

async function readOr(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
}

describe('install flow (cni/test/testdata, inputs.md §5.9)', () => {
  for (const c of CASES) {
    it(c.name, async (t) => {
      const { host, controller, run } = await hostForRun(t);
      await seedOrdered(host.netDir, c.seeded);
      const { logger } = captureLogger();
      const installer = new Installer({
        settings: cniTestSettings(host, { chained: c.chained, confName: c.confName }),
        logger,
        throttle: { maxDelayMs: 20 },
      });
      const running = run(installer);
      const resultPath = join(host.netDir, c.result);
      const expected = await readFile(join(CNI_TESTDATA, c.expected), 'utf8');
      if (c.delayed !== undefined) {
        await new Promise((r) => setTimeout(r, 250));
        assert.notEqual(await readOr(resultPath), expected, 'result must not match before the delayed file exists');
        await copyFile(join(CNI_TESTDATA, 'pre', c.delayed), join(host.netDir, c.confName || c.result));
      }
      await waitFor('istio-cni binary', () => existsSync(join(host.binDir, 'istio-cni')) || undefined);
      await waitFor('expected result', async () => ((await readOr(resultPath)) === expected ? true : undefined));

      // Someone removes istio from the result; the installer restores it.
      if (c.chained) await atomicWrite(resultPath, removeIstioEntry(await readFile(resultPath, 'utf8')), 0o644);
      else await rm(resultPath);
      await waitFor('restored result', async () => ((await readOr(resultPath)) === expected ? true : undefined));

      controller.abort();
      await running;
      await installer.cleanup();
      if (c.clean !== undefined) assert.equal(await readFile(resultPath, 'utf8'), await readFile(join(CNI_TESTDATA, c.clean), 'utf8'));
      else assert.equal(existsSync(resultPath), false);
      assert.equal(existsSync(join(host.binDir, 'istio-cni')), false);
      assert.deepEqual(
        (await readdir(host.netDir)).filter((n) => n.includes('.tmp')),
        [],
      );
      assert.equal(existsSync(installer.kubeconfigPath), false);
    });
  }
});

describe('cleanup beyond upstream', () => {
  it('restores a converted .conf to its exact pre-install bytes when nobody changed it', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['minikube_cni.conf']);
    const original = await readFile(join(host.netDir, '00-minikube_cni.conf'));
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    await installer.installAll();
    assert.equal(existsSync(join(host.netDir, '00-minikube_cni.conf')), false);
    assert.equal(
      await readFile(join(host.netDir, '00-minikube_cni.conflist'), 'utf8'),
      await readFile(join(CNI_TESTDATA, MINIKUBE), 'utf8'),
    );
    const report = await installer.cleanup();
    assert.deepEqual(
      report.configs.map((x) => x.result),
      ['restored'],
    );
    assert.deepEqual(await readdir(host.netDir), ['00-minikube_cni.conf']);
    assert.deepEqual(await readFile(join(host.netDir, '00-minikube_cni.conf')), original);
    assert.equal((await stat(join(host.netDir, '00-minikube_cni.conf'))).mode & 0o777, 0o644);
  });

  it('only removes our entry when another writer changed the file since', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    await installer.installAll();
    const path = join(host.netDir, '00-calico.conflist');
    const changed = JSON.parse(await readFile(path, 'utf8')) as Record<string, unknown>;
    changed.extra = 'kept';
    await atomicWrite(path, JSON.stringify(changed), 0o644);
    const report = await installer.cleanup();
    assert.deepEqual(
      report.configs.map((x) => x.result),
      ['entry-removed'],
    );
    const after = JSON.parse(await readFile(path, 'utf8')) as { extra: string; plugins: { type: string }[] };
    assert.equal(after.extra, 'kept');
    assert.deepEqual(
      after.plugins.map((p) => p.type),
      ['calico', 'portmap'],
    );
  });

  it('keeps the binary while another config still names istio-cni', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    await installer.installAll();
    // A second file (e.g. written by an older installer) still chains istio-cni.
    await copyFile(join(CNI_TESTDATA, CALICO), join(host.netDir, '99-other.conflist'));
    const report = await installer.cleanup();
    assert.deepEqual(report.binaryKeptFor, ['99-other.conflist']);
    assert.equal(existsSync(join(host.binDir, 'istio-cni')), true);
    assert.equal(await readFile(join(host.netDir, '00-calico.conflist'), 'utf8'), await readFile(join(CNI_TESTDATA, CALICO_CLEAN), 'utf8'));
  });
});

describe('first pass started ahead of the daemon (prepare)', () => {
  it('copies the binaries and writes the kubeconfig, but leaves the CNI config to the pass itself', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const before = await readFile(join(host.netDir, '00-calico.conflist'));
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    installer.prepare();
    await waitFor('the prepared files', () => existsSync(installer.kubeconfigPath) && existsSync(join(host.binDir, 'istio-cni')));
    assert.deepEqual(await readFile(join(host.netDir, '00-calico.conflist')), before);
    const stats = await installer.installAll();
    // One pass: the prepared writes are counted in it, the config last.
    assert.equal(stats.filesWritten.at(-2), join(host.netDir, '00-calico.conflist'));
    assert.ok(stats.filesWritten.includes(join(host.binDir, 'istio-cni')));
    assert.ok(stats.filesWritten.includes(installer.kubeconfigPath));
    assert.equal(installer.passes, 1);
  });

  it('cleanup after a prepared pass that never ran removes what it wrote', async (t) => {
    const host = await scratchHost(t);
    await seedOrdered(host.netDir, ['calico.conflist']);
    const installer = new Installer({ settings: cniTestSettings(host), logger: captureLogger().logger });
    installer.prepare();
    await installer.cleanup();
    assert.equal(existsSync(join(host.binDir, 'istio-cni')), false);
    assert.equal(existsSync(installer.kubeconfigPath), false);
  });
});
