/**
 * Loaded into every test file's process (`--import`, the Makefile's `node_test`): once the file's
 * tests and hooks are done, the process has `ISTIO_CNI_TEST_FILE_GRACE_MS` (default 60 s) to exit.
 * One that does not (a child, a watcher, a timer or socket a test left open) would hold the whole
 * run: it is ended with exit code 1, which fails the file, naming what kept it alive. Unlike
 * `--test-force-exit`, nothing is cut short: a file exits by itself while anything is still being
 * written, and the timer fires only after every result has long been reported.
 */
import { after } from 'node:test';

const grace = Number(process.env.ISTIO_CNI_TEST_FILE_GRACE_MS ?? 60_000);

after(() => {
  setTimeout(() => {
    const alive = process
      .getActiveResourcesInfo()
      .filter((r) => r !== 'Timeout')
      .join(', ');
    process.stderr.write(
      `test file still running ${grace} ms after its last test: ended (kept alive by: ${alive || 'timers'}). Close what the tests opened.\n`,
    );
    process.exit(1);
  }, grace).unref();
});
