// Runs a test command and fails it if it left the host changed: usage `hostCheck.ts <command> [args...]`.
// The command gets a private TMPDIR that must be empty when it ends; network namespaces, links,
// iptables (legacy and nft, v4 and v6, empty tables included), the nft ruleset, ipsets, mounts,
// top-level cgroup directories, host paths and sysctls are compared before and after
// (test/e2e/support/hostSnapshot.ts). Only what appeared during the run counts; what another process
// on the machine had up for a while is dropped by looking again, every 2 s for up to
// HOST_CHECK_SETTLE_MS (only while something is still reported).
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { settledHostLeaks, takeHostSnapshot } from '../test/e2e/support/hostSnapshot.ts';

const argv = process.argv.slice(2);
if (argv.length === 0) {
  console.error('usage: hostCheck.ts <command> [args...]');
  process.exit(2);
}
const settleMs = Number(process.env.HOST_CHECK_SETTLE_MS ?? '20000');

const before = await takeHostSnapshot();
const privateTmp = mkdtempSync(join(tmpdir(), 'istio-cni-test.'));
// Like /tmp: tests run helpers as other users (a fake kubelet) from files they put there.
chmodSync(privateTmp, 0o1777);
const exitCode = await new Promise<number>((resolve) => {
  const child = spawn(argv[0] as string, argv.slice(1), { stdio: 'inherit', env: { ...process.env, TMPDIR: privateTmp } });
  child.on('error', (error) => {
    console.error(`hostCheck: ${error.message}`);
    resolve(127);
  });
  child.on('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
});

const leaks = await settledHostLeaks(before, settleMs);
for (const entry of readdirSync(privateTmp)) leaks.push(`tmp: ${entry} (in TMPDIR ${privateTmp})`);
rmSync(privateTmp, { recursive: true, force: true });

if (leaks.length > 0) {
  console.error(`hostCheck: \`${argv.join(' ')}\` left the host changed (${leaks.length}):`);
  for (const leak of leaks) console.error(`  ${leak}`);
  process.exit(exitCode === 0 ? 1 : exitCode);
}
console.error(`hostCheck: \`${argv.join(' ')}\` left nothing behind`);
process.exit(exitCode);
