/**
 * Runs a command that executes another architecture's programs (mmdebstrap installing an arm64
 * Debian tree runs its maintainer scripts chrooted in it) with qemu-user registered in a binfmt_misc
 * instance of its own, so nothing on the host changes.
 *
 * Since Linux 6.7 each user namespace may mount its own binfmt_misc, and exec consults the caller's.
 * The command runs in a new user namespace mapping every uid and gid onto itself (files keep the
 * owners dpkg gives them), a mount namespace for that binfmt_misc, and a PID namespace so that it may
 * mount /proc in its chroot. Both end with the command: the registration goes with them.
 */
import { spawn } from 'node:child_process';
import { readlinkSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Arch, binfmtRegistration } from './emulation.ts';

// The user namespace exists once unshare has called unshare(2); its maps are written from here (root
// in the parent namespace) before the script goes on: the line it waits for on stdin (sh reads a
// pipe a byte at a time, so what follows the line is the command's input). Arguments, not syntax:
// $1 is the registration line, the rest the command.
const SCRIPT = [
  'read -r _ || exit 1',
  'mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || { echo "a binfmt_misc of its own needs Linux 6.7 or later" >&2; exit 1; }',
  'printf %s "$1" > /proc/sys/fs/binfmt_misc/register || exit 1',
  'shift',
  'exec "$@"',
].join('\n');

const FULL_RANGE = '0 0 4294967295\n';

export interface PrivateBinfmtOptions {
  /** The command's standard input (default: none, end of file at once). */
  input?: string;
  /** Collect standard output and error and return them instead of passing them through. */
  capture?: boolean;
}

/** Runs `argv`; rejects, with what it wrote when captured, unless it exits 0. */
export async function runWithPrivateBinfmt(
  arch: Arch,
  argv: readonly string[],
  options: PrivateBinfmtOptions = {},
): Promise<{ stdout: string; stderr: string }> {
  if (process.getuid?.() !== 0) throw new Error(`running ${argv[0]} with ${arch} emulation needs root`);
  const registration = binfmtRegistration(arch);
  const output = options.capture ? 'pipe' : 'inherit';
  const child = spawn(
    'unshare',
    ['--user', '--mount', '--pid', '--fork', '--propagation', 'private', '--', 'sh', '-c', SCRIPT, 'sh', registration, ...argv],
    { stdio: ['pipe', output, output] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<number | string>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve(code ?? signal ?? 'unknown'));
  });
  let done = false;
  void exited.finally(() => {
    done = true;
  });
  try {
    const own = readlinkSync('/proc/self/ns/user');
    for (let waited = 0; ; waited += 5) {
      if (done) break;
      let ns: string | undefined;
      try {
        ns = readlinkSync(`/proc/${child.pid}/ns/user`);
      } catch {
        ns = undefined;
      }
      if (ns !== undefined && ns !== own) {
        writeFileSync(`/proc/${child.pid}/uid_map`, FULL_RANGE);
        writeFileSync(`/proc/${child.pid}/gid_map`, FULL_RANGE);
        break;
      }
      if (waited > 10_000) throw new Error('unshare did not create its user namespace within 10 s');
      await sleep(5);
    }
    child.stdin?.end(`go\n${options.input ?? ''}`);
  } catch (err) {
    child.kill('SIGKILL');
    await exited.catch(() => undefined);
    throw err;
  }
  const status = await exited;
  if (status !== 0) throw new Error(`${argv.join(' ')} (with ${arch} emulation) ended with ${status}${stderr ? `: ${stderr.trim()}` : ''}`);
  return { stdout, stderr };
}
