import { execFileSync } from 'node:child_process';
import { execPlugin } from './execPlugin.ts';
import type { NamedNetns } from './netns.ts';

export const REFERENCE_PLUGIN_DIR = '/usr/lib/cni';

export type PrimaryKind = 'bridge' | 'ptp';

/** Debian's reference plugins speak CNI up to 1.0.0. */
export const REFERENCE_MAX_VERSION = '1.0.0';

function disableDad(ns: NamedNetns): void {
  for (const key of ['net.ipv6.conf.all.accept_dad', 'net.ipv6.conf.default.accept_dad']) {
    execFileSync('ip', ['netns', 'exec', ns.name, 'sysctl', '-qw', `${key}=0`]);
  }
}

export function primaryConf(kind: PrimaryKind, cniVersion: string, dataDir: string, index: number): Record<string, unknown> {
  const ipam = {
    type: 'host-local',
    dataDir,
    ranges: [[{ subnet: `10.${90 + index}.0.0/24` }], [{ subnet: `fd00:${90 + index}::/64` }]],
    routes: [{ dst: '0.0.0.0/0' }, { dst: '::/0' }],
  };
  const base = { cniVersion, name: `ref-${kind}-${index}`, ipam };
  return kind === 'bridge'
    ? { ...base, type: 'bridge', bridge: `tbr${index}`, isGateway: true, ipMasq: false }
    : { ...base, type: 'ptp', ipMasq: false };
}

export interface PrimaryAttachment {
  conf: Record<string, unknown>;
  /** The primary plugin's result exactly as it printed it. */
  result: Record<string, unknown>;
  cniEnv: Record<string, string>;
}

/**
 * Runs a Debian reference plugin (bridge or ptp, with host-local IPAM, dual stack) for a pod netns,
 * from inside a "node" netns so that nothing it creates lands in the real host namespace.
 */
export async function attachPrimary(
  kind: PrimaryKind,
  cniVersion: string,
  node: NamedNetns,
  pod: NamedNetns,
  dataDir: string,
  index: number,
): Promise<PrimaryAttachment> {
  disableDad(node);
  disableDad(pod);
  const conf = primaryConf(kind, cniVersion, dataDir, index);
  const cniEnv = {
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: `ref-${pod.name}`,
    CNI_NETNS: pod.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH: REFERENCE_PLUGIN_DIR,
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${pod.name}`,
  };
  const res = await execPlugin(`${REFERENCE_PLUGIN_DIR}/${kind}`, cniEnv, JSON.stringify(conf), { wrap: node.exec });
  if (res.code !== 0) throw new Error(`${kind} ADD failed (${res.code}): ${res.stdout} ${res.stderr}`);
  return { conf, result: JSON.parse(res.stdout) as Record<string, unknown>, cniEnv };
}
