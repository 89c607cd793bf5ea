'use strict';
// Build step: compiles the bundle with every function compiled eagerly and writes V8's code cache of
// that, without running anything. The cache holds the whole bundle, so its bytes depend on the
// source and the flags alone: no run decides which functions it holds (a warm-up's did, and timing
// changed that set from build to build). V8 keeps --lazy in the cache's flag hash, so a cache made
// under --no-lazy would be rejected by the executable; the flag is set for the compile only and put
// back before the cache is serialized, whose flag hash is then the executable's. The build checks
// the executable accepts it (ISTIO_CNI_CHECK_CODE_CACHE). Run with --predictable --random-seed (left
// out of the flag hash) so the string hash seed is fixed.
const fs = require('node:fs');
const v8 = require('node:v8');
const vm = require('node:vm');
const { wrap, FILENAME } = require('./wrapper.cjs');

const [bundlePath, cachePath] = process.argv.slice(2);
const source = wrap(fs.readFileSync(bundlePath, 'utf8'));
v8.setFlagsFromString('--no-lazy');
const script = new vm.Script(source, { filename: FILENAME });
v8.setFlagsFromString('--lazy');
fs.writeFileSync(cachePath, script.createCachedData());
