import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import {
  dryRunDocuments,
  goldenRestoreText,
  readIptablesGolden,
  readNftGolden,
  trimmed,
} from '../../packages/install-cni/test/istioIptablesHarness.ts';
import { DAEMON as EXECUTABLE, EMULATION_SKIP } from '../support/daemonProcess.ts';
import { launchArgv } from '../support/emulation.ts';

/** Runs the executable under test (through its emulator when it is another architecture's). */
function runDaemon(args: readonly string[], env: Record<string, string> = {}) {
  const [command, ...argv] = launchArgv(EXECUTABLE, args);
  const result = spawnSync(command, argv, {
    encoding: 'utf8',
    env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', ENABLE_INBOUND_IPV6: 'false', ...env },
    timeout: 20_000,
  });
  return { stdout: result.stdout, stderr: result.stderr, status: result.status };
}

function run(args: readonly string[], env: Record<string, string> = {}) {
  return runDaemon(['istio-iptables', ...args], env);
}

function missingOrStale(): string | undefined {
  if (!existsSync(EXECUTABLE)) return 'dist/install-cni not built';
  // A binary built before the sub-command existed is stale, not wrong.
  if (run(['--help']).status !== 0) return 'dist/install-cni predates istio-iptables (rebuild it)';
  return undefined;
}

/** Run on its own, a missing or stale build skips; `make test` builds first and sets ISTIO_CNI_REQUIRE_DIST=1, so there it fails. */
function skipReason(): string | false {
  if (EMULATION_SKIP) return EMULATION_SKIP;
  const why = missingOrStale();
  if (why === undefined) return false;
  if (process.env.ISTIO_CNI_REQUIRE_DIST === '1') throw new Error(`${why} (ISTIO_CNI_REQUIRE_DIST=1)`);
  return why;
}

const skip = skipReason();

test('dist/install-cni --help lists its options and commands, and exits 0', { skip }, () => {
  const help = runDaemon(['--help']);
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^Usage: install-cni \[options\] \[command\]/);
  for (const command of ['install-binaries', 'istio-iptables', 'check-runtime', 'doctor'])
    assert.match(help.stdout, new RegExp(`\\n  ${command} `));
  assert.equal(help.stderr, '');
});

test('dist/install-cni istio-iptables --dry-run prints the golden documents', { skip }, () => {
  const out = run(['--dry-run', '-b', '32000,31000', '-m', 'TPROXY']);
  assert.equal(out.status, 0, out.stderr);
  assert.equal(trimmed(dryRunDocuments(out.stdout)), trimmed(goldenRestoreText(readIptablesGolden('inbound-ports-tproxy'))));
  const nft = run(['-n', '--native-nftables', '-k', 'eth1,eth2', '-i', '*']);
  assert.equal(nft.status, 0, nft.stderr);
  assert.equal(trimmed(dryRunDocuments(nft.stdout)), trimmed(readNftGolden('kube-virt-interfaces')));
});

test('dist/install-cni istio-iptables reads env fallbacks and exits non-zero on a bad value', { skip }, () => {
  const viaEnv = run(['--dry-run'], { ISTIO_INBOUND_PORTS: '32000,31000' });
  assert.equal(viaEnv.status, 0, viaEnv.stderr);
  assert.equal(trimmed(dryRunDocuments(viaEnv.stdout)), trimmed(goldenRestoreText(readIptablesGolden('inbound-ports-include'))));
  const bad = run(['--dry-run', '-p', '70000']);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /invalid value "70000" for --envoy-port \(-p\)/);
  assert.equal(bad.stdout, '');
  const unknown = run(['--no-such-flag']);
  assert.notEqual(unknown.status, 0);
  assert.match(unknown.stderr, /unknown option '--no-such-flag'/);
});
