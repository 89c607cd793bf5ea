'use strict';
// Build step: runs a bundle through one vm.Script and at exit writes V8's code cache. Created after
// execution, the cache also holds the functions compiled lazily on the paths that ran, which SEA's
// own code cache (made before anything runs) lacks. With a plan (the plugin), the bundle runs once
// per planned invocation (env and stdin file as given, one after the other in this process); every
// run of the same script shares its compiled functions, so the cache holds the paths of all runs.
// Without one (the daemon), it runs once with this process's env until the process exits.
const fs = require('node:fs');
const vm = require('node:vm');
const { wrap, FILENAME } = require('./wrapper.cjs');

const [bundlePath, cachePath, planPath] = process.argv.slice(2);
// The bundle sees the arguments the executable would get: none.
process.argv.splice(2);
/** @type {{ env: Record<string, string>, stdin: string }[]} */
const plan = planPath === undefined ? [] : JSON.parse(fs.readFileSync(planPath, 'utf8'));
const script = new vm.Script(wrap(fs.readFileSync(bundlePath, 'utf8')), { filename: FILENAME });

function run() {
  const mod = { exports: {} };
  script.runInThisContext()(mod.exports, require, mod, FILENAME, '/');
}

function start(planned) {
  for (const key of Object.keys(process.env)) delete process.env[key];
  Object.assign(process.env, planned.env);
  // The bundle reads its netconf from fd 0: the lowest free descriptor, so this run's input becomes it.
  fs.closeSync(0);
  if (fs.openSync(planned.stdin, 'r') !== 0) throw new Error('stdin of a warm-up run did not open as fd 0');
  run();
}

let taken = false;
function takeCache() {
  const tmp = `${cachePath}.tmp`;
  fs.writeFileSync(tmp, script.createCachedData());
  fs.renameSync(tmp, cachePath);
  taken = true;
}
process.on('exit', (code) => {
  if (code === 0 && !taken) takeCache();
});
if (planPath === undefined) {
  // The daemon: the driver asks for the cache at a quiet moment of its choosing (SIGUSR2), before the
  // stop, so the paths of the shutdown (whose API requests may or may not finish first) stay out.
  process.on('SIGUSR2', takeCache);
  run();
} else {
  let next = 0;
  // Each run ends when the event loop has nothing left; the next one starts from there.
  process.on('beforeExit', () => {
    if (process.exitCode === 0 && next < plan.length) start(plan[next++]);
  });
  start(plan[next++]);
}
