import type { CommandRunner, RunOptions } from './commandRunner.ts';
import { type IptablesBackend, type IptablesFamily, versionAtLeast } from './detectIptablesBackend.ts';

/**
 * Legacy iptables serialises writers through a lock file that is global (/run/xtables.lock) by
 * default, so pods would wait on each other and on kube-proxy. Rules of different netns never
 * conflict, so the lock is the netns file itself (XTABLES_LOCKFILE, honoured since 1.8.6), the
 * same choice upstream makes. iptables-nft takes no lock.
 */
export function xtablesRunOptions(backend: IptablesBackend, netns: string): RunOptions {
  if (backend.nfTables || !versionAtLeast(backend.version, 1, 8, 6)) return { netns };
  return { netns, env: { XTABLES_LOCKFILE: netns } };
}

/**
 * `iptables-restore --noflush` of `stdin` in `netns` (waiting for the legacy lock where it exists),
 * written from the user namespace that owns the netns (`RunOptions.enterNetnsOwner`).
 */
export async function restoreIptables(
  runner: CommandRunner,
  backend: IptablesBackend,
  family: IptablesFamily,
  netns: string,
  stdin: string,
): Promise<void> {
  const argv = [backend.binaries[family].restore, '--noflush'];
  if (!backend.nfTables && versionAtLeast(backend.version, 1, 6, 2)) argv.push('--wait=30');
  const options = xtablesRunOptions(backend, netns);
  await runner.run(argv, { ...options, ...(options.netns === undefined ? {} : { enterNetnsOwner: true }), stdin });
}
