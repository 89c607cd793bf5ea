/**
 * The chart turns the container's memory limit into `NODE_OPTIONS=--max-old-space-size=<MiB>` (the
 * Node.js counterpart of upstream's GOMEMLIMIT). The built `dist/install-cni` is a single-executable
 * application with embedded runtime flags: this proves it still honours NODE_OPTIONS, on top of
 * those flags, and that V8 really takes the limit (setting the flag after start-up would not).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { DAEMON } from '../support/daemonProcess.ts';

function checkRuntime(env: NodeJS.ProcessEnv): { flags: string; heapMiB: number } {
  const out = execFileSync(DAEMON, ['check-runtime'], { env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', ...env }, encoding: 'utf8' });
  const [flags = '', heap = ''] = out.split('\n');
  const m = /^heap limit (\d+) MiB$/.exec(heap);
  assert.ok(m, `check-runtime printed no heap limit: ${JSON.stringify(out)}`);
  return { flags, heapMiB: Number(m[1]) };
}

describe('dist/install-cni heap limit from NODE_OPTIONS', () => {
  it('takes --max-old-space-size from NODE_OPTIONS and keeps its embedded flags', () => {
    const unset = checkRuntime({});
    const limited = checkRuntime({ NODE_OPTIONS: '--max-old-space-size=96' });
    // The old space is what the flag sets; the young generation (1 MiB semi-spaces) comes on top.
    assert.ok(limited.heapMiB >= 96 && limited.heapMiB <= 104, `heap limit ${limited.heapMiB} MiB for --max-old-space-size=96`);
    assert.ok(unset.heapMiB > 200, `the default heap limit (${unset.heapMiB} MiB) is the machine's, not the flag's`);
    assert.match(limited.flags, /--max-semi-space-size=1 --no-opt --no-maglev/);
    assert.equal(checkRuntime({ NODE_OPTIONS: '--max-old-space-size=384' }).heapMiB >= 384, true);
  });
});
