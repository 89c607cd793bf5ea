'use strict';
// Build step: runs the plugin bundle through one vm.Script once per planned invocation (env and
// stdin file as given, one after the other in this process), and at exit writes V8's code cache.
// Created after execution, the cache also holds the functions compiled lazily on those paths,
// which SEA's own code cache (made before anything runs) lacks; every run of the same script
// shares its compiled functions, so the cache holds the paths of all runs.
const fs = require('node:fs');
const vm = require('node:vm');
const { wrap, FILENAME } = require('./wrapper.cjs');

const [bundlePath, cachePath, planPath] = process.argv.slice(2);
/** @type {{ env: Record<string, string>, stdin: string }[]} */
const plan = JSON.parse(fs.readFileSync(planPath, 'utf8'));
const script = new vm.Script(wrap(fs.readFileSync(bundlePath, 'utf8')), { filename: FILENAME });

function start(run) {
  for (const key of Object.keys(process.env)) delete process.env[key];
  Object.assign(process.env, run.env);
  // The bundle reads its netconf from fd 0: the lowest free descriptor, so this run's input becomes it.
  fs.closeSync(0);
  if (fs.openSync(run.stdin, 'r') !== 0) throw new Error('stdin of a warm-up run did not open as fd 0');
  const mod = { exports: {} };
  script.runInThisContext()(mod.exports, require, mod, FILENAME, '/');
}

let next = 0;
// Each run ends when the event loop has nothing left; the next one starts from there.
process.on('beforeExit', () => {
  if (process.exitCode === 0 && next < plan.length) start(plan[next++]);
});
process.on('exit', (code) => {
  if (code === 0) fs.writeFileSync(cachePath, script.createCachedData());
});
start(plan[next++]);
