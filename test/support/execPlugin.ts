import { spawn } from 'node:child_process';
import { launchArgv } from './emulation.ts';

export interface ExecResult {
  stdout: string;
  stderr: string;
  code: number | null;
}

/**
 * Runs a CNI plugin the way libcni does: a clean environment holding only the `CNI_*` variables
 * (plus PATH), the netconf on stdin, stdout/stderr captured. The per-call timeout puts the output
 * into the failure, shorter than any test timeout. An executable of another architecture runs under
 * its emulator (emulation.ts).
 */
export function execPlugin(
  file: string,
  cniEnv: Record<string, string>,
  stdin: string | Buffer,
  opts: { timeoutMs?: number; cwd?: string; wrap?: string[] } = {},
): Promise<ExecResult> {
  const argv = [...(opts.wrap ?? []), ...launchArgv(file)];
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), {
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', ...cniEnv },
      cwd: opts.cwd ?? '/',
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} (${cniEnv.CNI_COMMAND}) timed out\nstdout: ${Buffer.concat(out)}\nstderr: ${Buffer.concat(err)}`));
    }, opts.timeoutMs ?? 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(), code });
    });
    child.stdin.on('error', () => {}); // the plugin may exit before reading everything
    child.stdin.end(stdin);
  });
}
