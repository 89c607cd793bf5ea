import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import type { ProcFs } from './procFs.ts';

/**
 * The kubelet's real UID, for the nft host rule (nft has no `--socket-exists`, so kubelet probes
 * are recognised by socket owner). Found by scanning procfs (as upstream `cni/pkg/nftables`): `comm` is `kubelet` or
 * `kubelite` (MicroK8s) with "kubelet" in the command line, or `k3s` (its kubelet runs in-process).
 */
export async function findKubeletUid(procFs: ProcFs): Promise<number> {
  const pids = (await procFs.readDir())
    .filter((e) => e.isDirectory && /^\d+$/.test(e.name))
    .map((e) => e.name)
    .sort((a, b) => Number(a) - Number(b));
  for (const pid of pids) {
    try {
      const comm = (await procFs.readFile(`${pid}/comm`)).trim();
      if (comm !== 'kubelet' && comm !== 'kubelite' && comm !== 'k3s') continue;
      if (comm !== 'k3s' && !(await procFs.readFile(`${pid}/cmdline`)).includes('kubelet')) continue;
      const uid = /^Uid:\s+(\d+)/m.exec(await procFs.readFile(`${pid}/status`))?.[1];
      if (uid !== undefined) return Number(uid);
    } catch {
      // the process exited while we looked
    }
  }
  throw new AmbientDataplaneError('ERR_AMBIENT_KUBELET_UID', 'failed to find the kubelet process (comm "kubelet", "kubelite" or "k3s") in procfs');
}
