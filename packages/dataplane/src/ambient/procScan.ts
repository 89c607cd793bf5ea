import { stat } from 'node:fs/promises';
import type { ProcFs } from './procFs.ts';

export type ScanLog = (level: 'debug' | 'warn', message: string) => void;

export interface NetnsIdentity {
  ino: number;
  dev: number;
}

/**
 * Every process of the procfs root in pid order, each looked at by `read`; yields the pids for
 * which `read` found something. Processes come and go during a scan: one whose `read` throws
 * (vanished, unreadable) is logged and skipped, and the scan goes on.
 */
export async function* scanProcesses<T>(
  procFs: ProcFs,
  read: (pid: string) => Promise<T | undefined>,
  log: ScanLog = () => {},
): AsyncGenerator<{ pid: string; found: T }> {
  const pids = (await procFs.readDir()).filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(a) - Number(b));
  for (const pid of pids) {
    let found: T | undefined;
    try {
      found = await read(pid);
    } catch (err) {
      log('debug', `pid ${pid}: skipped: ${(err as Error).message}`);
      continue;
    }
    if (found !== undefined) yield { pid, found };
  }
}

/**
 * The host netns identity: `hostNetnsPath` when the caller knows it better than procfs does, else
 * `1/ns/net`. Where pid 1 cannot be inspected (a sandbox's init, a hardened procfs: EACCES even for
 * root) our own netns stands in: it is the host's when the agent runs in the host netns
 * (hostNetwork), which is the only set-up where procfs has pid 1 out of reach but pods in it, and
 * never a pod's otherwise.
 */
export async function hostNetnsIdentity(procFs: ProcFs, log: ScanLog, hostNetnsPath?: string): Promise<NetnsIdentity> {
  if (hostNetnsPath !== undefined) {
    const s = await stat(hostNetnsPath);
    return { ino: s.ino, dev: s.dev };
  }
  try {
    return await procFs.stat('1/ns/net');
  } catch (err) {
    log('warn', `cannot inspect the host netns through pid 1 (${(err as Error).message}); treating this process's netns as the host's`);
    return procFs.stat('self/ns/net');
  }
}

export const sameNetns = (a: NetnsIdentity, b: NetnsIdentity): boolean => a.ino === b.ino && a.dev === b.dev;
