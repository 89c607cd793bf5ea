'use strict';
// The main script of both executables: compiles the embedded bundle with the warmed code cache
// (see warmCodeCache.cjs) and runs it. The plugin's start-up is the pod-start latency users pay;
// the daemon's, the node's time without an agent on every restart.
const vm = require('node:vm');
const { getAsset } = require('node:sea');
const { wrap, FILENAME } = require('./wrapper.cjs');

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
