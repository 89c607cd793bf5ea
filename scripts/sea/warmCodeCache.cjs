'use strict';
// Build step: runs the plugin bundle once (env and stdin as given) through vm.Script, and at exit
// writes V8's code cache. Created after execution, the cache also holds the functions compiled
// lazily on that path, which SEA's own code cache (made before anything runs) lacks.
const fs = require('node:fs');
const vm = require('node:vm');
const { wrap, FILENAME } = require('./wrapper.cjs');

const [bundlePath, cachePath] = process.argv.slice(2);
// The bundle sees the arguments the executable would get: none.
process.argv.splice(2);
const script = new vm.Script(wrap(fs.readFileSync(bundlePath, 'utf8')), { filename: FILENAME });
process.on('exit', () => fs.writeFileSync(cachePath, script.createCachedData()));
const mod = { exports: {} };
script.runInThisContext()(mod.exports, require, mod, FILENAME, '/');
