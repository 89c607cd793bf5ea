import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { loadKoffi } from '@istio-cni/dataplane';

const loadIn = (env: NodeJS.ProcessEnv) =>
  spawnSync(
    process.execPath,
    ['--input-type=module', '-e', "const { loadKoffi } = await import('@istio-cni/dataplane'); console.log(loadKoffi().version);"],
    {
      cwd: new URL('../', import.meta.url),
      env: { ...process.env, ...env },
      encoding: 'utf8',
    },
  );

test('koffi loads from its prebuilt package without its JavaScript entry', () => {
  const koffi = loadKoffi();
  assert.match(koffi.version, /^\d+\.\d+\.\d+$/);
  assert.equal(typeof koffi.node.poll, 'function');
});

test('ISTIO_CNI_KOFFI_PATH overrides the location; a bad one fails naming the path', () => {
  const ok = loadIn({
    ISTIO_CNI_KOFFI_PATH: execFileSync(
      process.execPath,
      ['-p', "require.resolve('@koromix/koffi-linux-x64/package.json').replace('package.json', 'linux_x64/koffi.node')"],
      { encoding: 'utf8' },
    ).trim(),
  });
  assert.equal(ok.status, 0, ok.stderr);
  const bad = loadIn({ ISTIO_CNI_KOFFI_PATH: '/nonexistent/koffi.node' });
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /failed to load koffi native module "\/nonexistent\/koffi.node"/);
});

test('malloc_trim runs only in a process that loaded koffi for something else', () => {
  const trimIn = (script: string) =>
    spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: new URL('../', import.meta.url),
      encoding: 'utf8',
    });
  const fresh = trimIn("const d = await import('@istio-cni/dataplane'); console.log(d.trimMallocArenas(), typeof d.loadedKoffi);");
  assert.equal(fresh.stdout.trim(), 'false undefined', fresh.stderr);
  const loaded = trimIn(
    "const d = await import('@istio-cni/dataplane'); d.loadKoffi(); console.log(d.trimMallocArenas(), d.trimMallocArenas());",
  );
  assert.equal(loaded.stdout.trim(), 'true true', loaded.stderr);
});
