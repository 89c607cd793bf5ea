import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, writeFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { checkValidCniConfig } from '../src/installer/checkValidCniConfig.ts';
import { cleanupInstall } from '../src/installer/cleanupInstall.ts';
import { insertCniConfig } from '../src/installer/insertCniConfig.ts';
import { pluginConfigText } from '@istio-cni/handoff';
import { WaitAborted, resolveCniConfigPath } from '../src/installer/resolveCniConfigPath.ts';
import { writeCniConfig } from '../src/installer/writeCniConfig.ts';
import { INSTALL_TESTDATA, INSTALL_TEST_PLUGIN, cniSettings, fixture, seed, tempDir } from './testHelpers.ts';

const td = (name: string) => join(INSTALL_TESTDATA, name);

describe('insertCniConfig (inputs.md §5.3)', () => {
  const cases: [string, string, string, string | undefined][] = [
    ['invalid existing config format (map)', 'invalid-map.conflist', 'istio-cni.conf', undefined],
    ['invalid new config format (arr)', 'list.conflist', 'invalid-arr.conflist', undefined],
    ['invalid existing config format (arr)', 'invalid-arr.conflist', 'istio-cni.conf', undefined],
    ['regular network file', 'bridge.conf', 'istio-cni.conf', 'bridge.conf.golden'],
    ['list network file', 'list.conflist', 'istio-cni.conf', 'list.conflist.golden'],
    ['list network file with existing istio', 'list-with-istio.conflist', 'istio-cni.conf', 'list-with-istio.conflist.golden'],
  ];
  for (const [name, existing, added, golden] of cases) {
    it(name, async () => {
      const run = async () => insertCniConfig(await fixture(td(added)), await fixture(td(existing)));
      if (golden === undefined) await assert.rejects(run);
      else assert.equal((await run()).trim(), (await fixture(td(golden))).trim());
    });
  }

  it('fresh plugin config matches istio-cni.conf byte for byte', async () => {
    assert.equal(pluginConfigText(INSTALL_TEST_PLUGIN), await fixture(td('istio-cni.conf')));
  });
});

describe('writeCniConfig (inputs.md §5.4)', () => {
  const both = { 'bridge.conf': 'bridge.conf', 'list.conflist': 'list.conflist' };
  const undetectable = { 'bridge.conf': 'bridge.conf', 'undetectable.file': 'list.conflist' };
  const cases: {
    name: string;
    chained: boolean;
    confName: string;
    seeded: Record<string, string>;
    owned: boolean;
    expected?: [string, string];
  }[] = [
    {
      name: 'unspecified existing CNI config file (existing .conf to conflist)',
      chained: true,
      confName: '',
      seeded: both,
      owned: false,
      expected: ['bridge.conflist', 'bridge.conf.golden'],
    },
    { name: 'unspecified CNI config file never created', chained: true, confName: '', seeded: {}, owned: false },
    {
      name: 'specified existing CNI config file',
      chained: true,
      confName: 'list.conflist',
      seeded: both,
      owned: false,
      expected: ['list.conflist', 'list.conflist.golden'],
    },
    {
      name: 'specified existing CNI config file (specified .conf to .conflist)',
      chained: true,
      confName: 'list.conf',
      seeded: both,
      owned: false,
      expected: ['list.conflist', 'list.conflist.golden'],
    },
    {
      name: 'specified existing CNI config file (existing .conf to .conflist)',
      chained: true,
      confName: 'bridge.conflist',
      seeded: both,
      owned: false,
      expected: ['bridge.conflist', 'bridge.conf.golden'],
    },
    { name: 'specified CNI config file never created', chained: true, confName: 'never-created.conf', seeded: both, owned: false },
    {
      name: 'specified CNI config file undetectable',
      chained: true,
      confName: 'undetectable.file',
      seeded: undetectable,
      owned: false,
      expected: ['undetectable.file', 'list.conflist.golden'],
    },
    {
      name: 'standalone CNI plugin unspecified CNI config file',
      chained: false,
      confName: '',
      seeded: {},
      owned: false,
      expected: ['YYY-istio-cni.conf', 'istio-cni.conf'],
    },
    {
      name: 'standalone CNI plugin specified CNI config file',
      chained: false,
      confName: 'specific-name.conf',
      seeded: {},
      owned: false,
      expected: ['specific-name.conf', 'istio-cni.conf'],
    },
    {
      name: 'specified existing .conf primary CNI config file - istio owned',
      chained: true,
      confName: 'bridge.conflist',
      seeded: both,
      owned: true,
      expected: ['02-istio-conf.conflist', 'istio-owned-bridge.conflist.golden'],
    },
    {
      name: 'specified existing primary .conflist CNI config file - istio owned',
      chained: true,
      confName: 'list.conflist',
      seeded: both,
      owned: true,
      expected: ['02-istio-conf.conflist', 'istio-owned.conflist.golden'],
    },
    {
      name: 'specified existing CNI config file (specified .conf to .conflist) - istio owned',
      chained: true,
      confName: 'list.conf',
      seeded: both,
      owned: true,
      expected: ['02-istio-conf.conflist', 'istio-owned.conflist.golden'],
    },
    {
      name: 'specified existing CNI config file (existing .conf to .conflist) - istio owned',
      chained: true,
      confName: 'bridge.conflist',
      seeded: both,
      owned: true,
      expected: ['02-istio-conf.conflist', 'istio-owned-bridge.conflist.golden'],
    },
    {
      name: 'specified CNI config file never created - istio owned',
      chained: true,
      confName: '02-istio-conf.conflist',
      seeded: both,
      owned: true,
    },
    {
      name: 'specified CNI config file undetectable - istio owned',
      chained: true,
      confName: 'undetectable.file',
      seeded: undetectable,
      owned: true,
      expected: ['02-istio-conf.conflist', 'istio-owned.conflist.golden'],
    },
  ];
  for (const c of cases) {
    for (const round of ['network-config-file ', '']) {
      it(`${round}${c.name}`, async (t) => {
        const dir = await tempDir(t);
        await seed(dir, c.seeded);
        const settings = cniSettings(
          dir,
          { chainedCniPlugin: c.chained, cniConfName: c.confName, owned: c.owned },
          { ambientEnabled: c.owned },
        );
        const run = () => writeCniConfig(settings, { primaryName: c.confName, signal: AbortSignal.timeout(100) });
        if (c.expected === undefined) {
          await assert.rejects(run, WaitAborted);
          return;
        }
        const record = await run();
        assert.equal(record.path, join(dir, c.expected[0]));
        assert.equal((await readFile(record.path, 'utf8')).trim(), (await fixture(td(c.expected[1]))).trim());
        if (c.owned) {
          // The primary stays untouched in owned mode.
          for (const [name, src] of Object.entries(c.seeded)) assert.equal(await readFile(join(dir, name), 'utf8'), await fixture(td(src)));
        }
      });
    }
  }
});

describe('checkValidCniConfig (inputs.md §5.5)', () => {
  const cases: {
    name: string;
    seeded: Record<string, string>;
    file: string;
    confName?: string;
    chained?: boolean;
    owned?: boolean;
    ownedFilename?: string;
    valid: boolean;
  }[] = [
    {
      name: 'preempted config',
      seeded: { 'bridge.conf': 'bridge.conf', 'list.conflist': 'list.conflist.golden' },
      file: 'list.conflist',
      valid: false,
    },
    {
      name: 'intentional preempted config invalid',
      seeded: { 'bridge.conf': 'bridge.conf', 'invalid-arr.conflist': 'invalid-arr.conflist' },
      file: 'invalid-arr.conflist',
      confName: 'invalid-arr.conflist',
      valid: false,
    },
    {
      name: 'intentional preempted config, missing istio owned config',
      seeded: { 'bridge.conf': 'bridge.conf', 'list.conflist': 'list.conflist.golden' },
      file: 'list.conflist',
      confName: 'list.conflist',
      owned: true,
      valid: false,
    },
    {
      name: 'intentional preempted config',
      seeded: { 'bridge.conf': 'bridge.conf', 'list.conflist': 'list.conflist.golden' },
      file: 'list.conflist',
      confName: 'list.conflist',
      valid: true,
    },
    { name: 'CNI config file removed', seeded: {}, file: 'file-removed.conflist', chained: false, valid: false },
    {
      name: 'istio-cni config removed from CNI config file - istio owned config',
      seeded: { '02-istio-conf.conflist': 'list.conflist' },
      file: '02-istio-conf.conflist',
      owned: true,
      valid: false,
    },
    {
      name: 'istio-cni config removed from CNI config file',
      seeded: { 'list.conflist': 'list.conflist' },
      file: 'list.conflist',
      valid: false,
    },
    {
      name: 'chained CNI plugin - istio owned',
      seeded: { '02-istio-conf.conflist': 'list.conflist.golden' },
      file: '02-istio-conf.conflist',
      owned: true,
      valid: true,
    },
    {
      name: 'existing chained CNI plugin custom config name- istio owned',
      seeded: { '01-istio-conf.conflist': 'list.conflist.golden' },
      file: '01-istio-conf.conflist',
      owned: true,
      ownedFilename: '01-istio-conf.conflist',
      valid: true,
    },
    {
      name: 'chained CNI plugin custom config name - istio owned',
      seeded: { 'list.conflist': 'list.conflist.golden' },
      file: 'list.conflist',
      owned: true,
      ownedFilename: '01-istio-conf.conflist',
      valid: false,
    },
    { name: 'chained CNI plugin', seeded: { 'list.conflist': 'list.conflist.golden' }, file: 'list.conflist', valid: true },
    {
      name: 'standalone CNI plugin istio-cni config not in CNI config file',
      seeded: { 'bridge.conf': 'bridge.conf' },
      file: 'bridge.conf',
      chained: false,
      valid: false,
    },
    { name: 'standalone CNI plugin', seeded: { 'istio-cni.conf': 'istio-cni.conf' }, file: 'istio-cni.conf', chained: false, valid: true },
  ];
  for (const c of cases) {
    it(c.name, async (t) => {
      const dir = await tempDir(t);
      await seed(dir, c.seeded);
      const settings = cniSettings(dir, {
        chainedCniPlugin: c.chained ?? true,
        cniConfName: c.confName ?? '',
        owned: c.owned ?? false,
        ...(c.ownedFilename ? { ownedFilename: c.ownedFilename } : {}),
      });
      const problem = await checkValidCniConfig(settings, { configPath: join(dir, c.file), primaryName: '' });
      assert.equal(problem === undefined, c.valid, problem);
    });
  }
});

describe('resolveCniConfigPath (inputs.md §5.8)', () => {
  const cases: { name: string; chained: boolean; confName: string; seeded: boolean; delayed?: string; result?: string }[] = [
    { name: 'unspecified existing CNI config file', chained: true, confName: '', seeded: true, result: 'bridge.conf' },
    {
      name: 'unspecified delayed CNI config file',
      chained: true,
      confName: '',
      seeded: false,
      delayed: 'bridge.conf',
      result: 'bridge.conf',
    },
    { name: 'unspecified CNI config file never created', chained: true, confName: '', seeded: false },
    { name: 'specified existing CNI config file', chained: true, confName: 'list.conflist', seeded: true, result: 'list.conflist' },
    {
      name: 'specified existing CNI config file (.conf to .conflist)',
      chained: true,
      confName: 'list.conf',
      seeded: true,
      result: 'list.conflist',
    },
    {
      name: 'specified existing CNI config file (.conflist to .conf)',
      chained: true,
      confName: 'bridge.conflist',
      seeded: true,
      result: 'bridge.conf',
    },
    {
      name: 'specified delayed CNI config file',
      chained: true,
      confName: 'bridge.conf',
      seeded: false,
      delayed: 'bridge.conf',
      result: 'bridge.conf',
    },
    { name: 'specified CNI config file never created', chained: true, confName: 'never-created.conf', seeded: true },
    {
      name: 'standalone CNI plugin unspecified CNI config file',
      chained: false,
      confName: '',
      seeded: false,
      result: 'YYY-istio-cni.conf',
    },
    {
      name: 'standalone CNI plugin specified CNI config file',
      chained: false,
      confName: 'specific-name.conf',
      seeded: false,
      result: 'specific-name.conf',
    },
  ];
  for (const c of cases) {
    it(c.name, async (t) => {
      const dir = await tempDir(t);
      if (c.seeded) await seed(dir, { 'bridge.conf': 'bridge.conf', 'list.conflist': 'list.conflist' });
      const settings = cniSettings(dir, { chainedCniPlugin: c.chained });
      const delayed = c.delayed;
      if (delayed !== undefined) setTimeout(() => void seed(dir, { [delayed]: 'bridge.conf' }), 250);
      // "Never created" ends by cancellation; delayed files need longer than their 250 ms.
      const signal = AbortSignal.timeout(c.result === undefined ? 500 : 10_000);
      const run = () => resolveCniConfigPath(settings, { name: c.confName, signal });
      if (c.result === undefined) await assert.rejects(run, WaitAborted);
      else assert.equal(await run(), join(dir, c.result));
    });
  }
});

describe('cleanupInstall (inputs.md §5.7)', () => {
  const cases: { name: string; chained: boolean; owned: boolean; seeded: [string, string]; expected?: string }[] = [
    {
      name: 'chained CNI plugin',
      chained: true,
      owned: false,
      seeded: ['list.conflist', 'list-with-istio.conflist'],
      expected: 'list-no-istio.conflist',
    },
    { name: 'standalone CNI plugin', chained: false, owned: false, seeded: ['istio-cni.conf', 'istio-cni.conf'] },
    { name: 'istio owned CNI config', chained: true, owned: true, seeded: ['istio-owned.conflist.golden', 'istio-owned.conflist.golden'] },
  ];
  for (const c of cases) {
    it(c.name, async (t) => {
      const netDir = await tempDir(t);
      const binDir = await tempDir(t);
      const [name, src] = c.seeded;
      await seed(netDir, { [name]: src });
      await writeFile(join(binDir, 'istio-cni'), '');
      await writeFile(join(netDir, 'kubeconfig'), '');
      const configPath = join(netDir, name);
      const report = await cleanupInstall({
        netDir,
        chained: c.chained,
        owned: c.owned,
        configs: [{ path: configPath, record: undefined }],
        kubeconfigPath: join(netDir, 'kubeconfig'),
        binTargetDirs: [binDir],
      });
      if (c.expected) {
        assert.equal((await readFile(configPath, 'utf8')).trim(), (await fixture(td(c.expected))).trim());
        assert.equal((await stat(configPath)).mode & 0o777, (await stat(td(src))).mode & 0o777, 'file mode preserved');
      } else {
        assert.equal(existsSync(configPath), false);
      }
      assert.equal(existsSync(join(netDir, 'kubeconfig')), false);
      assert.equal(existsSync(join(binDir, 'istio-cni')), false);
      assert.deepEqual(report.binaryKeptFor, []);
    });
  }

  it('unchains the plugin first, then waits for the runtime to reload before removing the kubeconfig and binary', async (t) => {
    const netDir = await tempDir(t);
    const binDir = await tempDir(t);
    await seed(netDir, { 'list.conflist': 'list-with-istio.conflist' });
    await writeFile(join(binDir, 'istio-cni'), '');
    await writeFile(join(netDir, 'kubeconfig'), '');
    const configPath = join(netDir, 'list.conflist');
    const seen: string[] = [];
    await cleanupInstall({
      netDir,
      chained: true,
      owned: false,
      configs: [{ path: configPath, record: undefined }],
      kubeconfigPath: join(netDir, 'kubeconfig'),
      binTargetDirs: [binDir],
      runtimeReload: async () => {
        seen.push((await readFile(configPath, 'utf8')).includes('istio-cni') ? 'chained' : 'unchained');
        seen.push(existsSync(join(netDir, 'kubeconfig')) ? 'kubeconfig' : 'no kubeconfig');
        seen.push(existsSync(join(binDir, 'istio-cni')) ? 'binary' : 'no binary');
      },
    });
    assert.deepEqual(seen, ['unchained', 'kubeconfig', 'binary']);
    assert.equal(existsSync(join(netDir, 'kubeconfig')), false);
    assert.equal(existsSync(join(binDir, 'istio-cni')), false);
  });
});
