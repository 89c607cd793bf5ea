'use strict';
// Build step after a warm-up: compiles the bundle with the warm-up's code cache in a fresh process
// that runs nothing, and writes the code cache V8 serializes from that. A warm-up's cache also
// records the run's own state (which functions Sparkplug compiled, per-isolate function ids: both
// follow timers and I/O order), so two warm-ups of the same bundle rarely give the same bytes; the
// functions compiled are the same, and re-serializing keeps just those. Run with --predictable
// --random-seed (which V8 leaves out of the code cache's flag hash) so the string hash seed is fixed.
const fs = require('node:fs');
const vm = require('node:vm');
const { wrap, FILENAME } = require('./wrapper.cjs');

const [bundlePath, warmCachePath, cachePath] = process.argv.slice(2);
const script = new vm.Script(wrap(fs.readFileSync(bundlePath, 'utf8')), {
  filename: FILENAME,
  cachedData: fs.readFileSync(warmCachePath),
});
if (script.cachedDataRejected) throw new Error(`${warmCachePath}: V8 rejected the warm-up's code cache`);
fs.writeFileSync(cachePath, script.createCachedData());
