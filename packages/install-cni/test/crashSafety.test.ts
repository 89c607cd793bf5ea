import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import YAML from 'yaml';
import { Installer } from '../src/installer/installer.ts';
import { CNI_TESTDATA, captureLogger, cniTestSettings, scratchHost, seedOrdered } from './testHelpers.ts';

const NODE = resolve(import.meta.dirname, '../../../node_modules/.bin/node');
const CHILD = resolve(import.meta.dirname, 'fixtures/passLoop.ts');
const ROUNDS = 15;

describe('crash safety', () => {
  it('kill -9 at random points during passes never leaves a torn or partial file', async (t) => {
    const host = await scratchHost(t);
    const src = join(host.root, 'src');
    await mkdir(src);
    // Large enough that a kill often lands inside a binary write.
    const fill = ['a', 'b'];
    const size = 2 * 1024 * 1024;
    const binaries = fill.map((c) => c.repeat(size));
    await writeFile(join(src, 'istio-cni'), binaries[0]!, { mode: 0o755 });
    await seedOrdered(host.netDir, ['calico.conflist']);
    const clean = await readFile(join(CNI_TESTDATA, 'pre/calico.conflist'), 'utf8');
    const withEntry = await readFile(join(CNI_TESTDATA, 'expected/10-calico.conflist-istioconfig'), 'utf8');
    const settings = cniTestSettings(host, { binSource: src });
    const arg = JSON.stringify({ settings, clean, fill, size });
    for (let round = 0; round < ROUNDS; round++) {
      const child = spawn(NODE, [CHILD, arg], { stdio: ['ignore', 'pipe', 'inherit'] });
      await new Promise<void>((res) => child.stdout.once('data', () => res()));
      await new Promise((r) => setTimeout(r, 20 + Math.random() * 200));
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));

      const bin = join(host.binDir, 'istio-cni');
      if (existsSync(bin)) assert.ok(binaries.includes(await readFile(bin, 'utf8')), `round ${round}: binary complete`);
      const conf = await readFile(join(host.netDir, '00-calico.conflist'), 'utf8');
      assert.ok(conf === clean || conf === withEntry, `round ${round}: config is a whole version`);
      const kc = join(host.runDir, 'istio-cni-kubeconfig');
      if (existsSync(kc)) {
        const doc = YAML.parse(await readFile(kc, 'utf8')) as { users: { user: { token: string } }[] };
        assert.match(doc.users[0]!.user.token, /^token-[01]$/, `round ${round}: kubeconfig complete`);
      }
    }
    // The next pass removes whatever temp files the kills left behind.
    await new Installer({ settings, logger: captureLogger().logger }).installAll();
    for (const dir of [host.binDir, host.netDir, host.runDir]) {
      assert.deepEqual(
        (await readdir(dir)).filter((n) => n.includes('.tmp.')),
        [],
        `no temp files left in ${dir}`,
      );
    }
  });
});
