'use strict';
// The main script of both executables: compiles the embedded bundle with the warmed code cache
// (see warmCodeCache.cjs) and runs it. The plugin's start-up is the pod-start latency users pay;
// the daemon's, the node's time without an agent on every restart.
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const { getAsset } = require('node:sea');
const { wrap, FILENAME } = require('./wrapper.cjs');

// Node names its main thread "MainThread", and on Linux the main thread's name is the process's
// name in /proc/<pid>/comm (ps, top, pgrep -x). Give the executable's own name back, as the kernel
// set it at exec (at most 15 bytes); the command line (/proc/<pid>/cmdline) is left as it was.
try {
  fs.writeFileSync('/proc/self/comm', path.basename(process.execPath).slice(0, 15));
} catch {
  // Without a writable /proc the name stays "MainThread"; nothing else depends on it.
}

const script = new vm.Script(wrap(getAsset('bundle.cjs', 'utf8')), {
  filename: FILENAME,
  cachedData: Buffer.from(getAsset('bundle.cache')),
});
if (process.env.ISTIO_CNI_CHECK_CODE_CACHE === '1' && script.cachedDataRejected) {
  process.stderr.write('code cache rejected\n');
  process.exit(70);
}
const mod = { exports: {} };
script.runInThisContext()(mod.exports, require, mod, FILENAME, '/');
