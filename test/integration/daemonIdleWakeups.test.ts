/**
 * An idle `dist/install-cni` sleeps: every agent of a fleet pays for each wake-up of its main
 * thread, and a timer that fires whatever the daemon is doing costs CPU on every node. The count is
 * the kernel's (voluntary context switches of the main thread), not a duration: prom-client's
 * default event-loop histogram alone woke it 100 times a second.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { EMULATION_SKIP } from '../support/daemonProcess.ts';
import { startAgentRig } from '../support/startAgentRig.ts';

const IDLE_MS = 3000;

function mainThreadWakeups(pid: number): number {
  const m = /^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8'));
  assert.ok(m, `no voluntary_ctxt_switches for ${pid}`);
  return Number(m[1]);
}

describe('dist/install-cni at rest', { skip: EMULATION_SKIP }, () => {
  it('wakes its main thread a few times a second, and still serves the event-loop histogram', async (t) => {
    const rig = await startAgentRig();
    try {
      const pid = rig.daemon.child.pid;
      assert.ok(pid !== undefined);
      // Past start-up: the installer's first pass and the informers' sync.
      await rig.daemon.waitForLog((e) => e.msg === 'initial installation complete; watching for changes');
      await sleep(500);
      const before = mainThreadWakeups(pid);
      await sleep(IDLE_MS);
      const wakeups = mainThreadWakeups(pid) - before;
      t.diagnostic(`${wakeups} wake-ups of the main thread in ${IDLE_MS} ms at rest`);
      // Once a second for the histogram, plus the odd timer; 10 ms sampling would be ~300 here.
      assert.ok(wakeups < 40, `${wakeups} wake-ups of the main thread in ${IDLE_MS} ms at rest`);
      const metrics = await (await fetch(`http://127.0.0.1:${rig.daemon.monitoringPort}/metrics`)).text();
      assert.match(metrics, /^nodejs_eventloop_lag_p99_seconds \d/m);
    } finally {
      await rig.close();
    }
  });
});
