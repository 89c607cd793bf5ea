import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import type { ProcFs } from './procFs.ts';
import { scanProcesses } from './procScan.ts';

/**
 * The kubelet's real UID, for the nft host rule (nft has no `--socket-exists`, so kubelet probes
 * are recognised by socket owner). Found by scanning procfs (as upstream `cni/pkg/nftables`): `comm` is `kubelet` or
 * `kubelite` (MicroK8s) with "kubelet" in the command line, or `k3s` (its kubelet runs in-process).
 */
export async function findKubeletUid(procFs: ProcFs): Promise<number> {
  const kubeletUid = async (pid: string): Promise<number | undefined> => {
    const comm = (await procFs.readFile(`${pid}/comm`)).trim();
    if (comm !== 'kubelet' && comm !== 'kubelite' && comm !== 'k3s') return undefined;
    if (comm !== 'k3s' && !(await procFs.readFile(`${pid}/cmdline`)).includes('kubelet')) return undefined;
    const uid = /^Uid:\s+(\d+)/m.exec(await procFs.readFile(`${pid}/status`))?.[1];
    return uid === undefined ? undefined : Number(uid);
  };
  for await (const { found } of scanProcesses(procFs, kubeletUid)) return found;
  throw new AmbientDataplaneError(
    'ERR_AMBIENT_KUBELET_UID',
    'failed to find the kubelet process (comm "kubelet", "kubelite" or "k3s") in procfs',
  );
}
