import { spawnSync } from 'node:child_process';
import { DAEMON } from './daemonProcess.ts';
import type { AgentRig } from './startAgentRig.ts';

export interface DoctorRun {
  code: number | null;
  report: { ok: boolean; problems: string[]; daemon: Record<string, unknown> };
  stdout: string;
}

/** `install-cni doctor -o json` run as an operator would (`kubectl exec ... -- install-cni doctor`), against the rig's host root. */
export function runDoctor(rig: AgentRig, args: string[]): DoctorRun {
  const r = spawnSync(DAEMON, ['doctor', ...args, '-o', 'json'], {
    env: {
      PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_BIN_SOURCE_DIR: rig.root.binSource,
      CNI_BIN_TARGET_DIRS: rig.root.binTarget,
      MOUNTED_CNI_NET_DIR: rig.root.netDir,
      CNI_AGENT_RUN_DIR: rig.root.runDir,
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { code: r.status, report: JSON.parse(r.stdout) as DoctorRun['report'], stdout: r.stdout };
}
