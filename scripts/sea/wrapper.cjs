'use strict';
// The bundle runs inside this function wrapper in both the build-time warm-up and the executable,
// so the V8 code cache produced by one matches the script compiled by the other.
exports.wrap = (source) => '(function (exports, require, module, __filename, __dirname) {' + source + '\n})';
exports.FILENAME = 'istio-cni.cjs';
