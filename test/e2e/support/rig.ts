import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startCluster, type Cluster, type ClusterOptions } from './cluster.ts';
import { startContainerd, type Containerd } from './containerd.ts';
import { nftTables, removeEmptyNftTables } from './emptyNftTables.ts';
import { settledHostLeaks, takeHostSnapshot } from './hostSnapshot.ts';
import { existingPortmapChains, removePrimaryNetworkLeftovers, writePrimaryNetwork, type PrimaryNetwork } from './primaryNetwork.ts';

/** The whole e2e rig: control plane, container runtime, and the primary network already loaded by CRI. */
export interface Rig {
  cluster: Cluster;
  containerd: Containerd;
  network: PrimaryNetwork;
  /** Stops everything, removes what the reference plugins leave by design, and returns any host state left behind. */
  stop(): Promise<string[]>;
}

/** How long a leftover may take to go before it counts (another engineer's netns, see settledHostLeaks). */
const RIG_SETTLE_MS = 20_000;
const FORWARDING_SYSCTLS = ['/proc/sys/net/ipv4/ip_forward', '/proc/sys/net/ipv6/conf/all/forwarding'];

export async function startRig(options: { cluster?: ClusterOptions } = {}): Promise<Rig> {
  const hostBefore = await takeHostSnapshot();
  const portmapChainsBefore = await existingPortmapChains();
  const nftTablesBefore = await nftTables();
  // The bridge plugin's gateway turns on forwarding host-wide.
  const forwardingBefore = FORWARDING_SYSCTLS.map((key) => [key, readFileSync(key, 'utf8')] as const);
  let cluster: Cluster | undefined;
  let containerd: Containerd | undefined;
  let network: PrimaryNetwork | undefined;
  const stop = async (): Promise<string[]> => {
    await containerd?.stop();
    await cluster?.stop();
    if (network !== undefined) await removePrimaryNetworkLeftovers(network, portmapChainsBefore);
    await removeEmptyNftTables(nftTablesBefore);
    for (const [key, value] of forwardingBefore) writeFileSync(key, value);
    return settledHostLeaks(hostBefore, RIG_SETTLE_MS);
  };
  try {
    cluster = await startCluster(options.cluster);
    containerd = await startContainerd();
    network = writePrimaryNetwork({
      confDir: containerd.cniConfDir,
      binDir: containerd.cniBinDir,
      ipamDataDir: join(containerd.dir, 'ipam'),
    });
    await containerd.waitNetworkReady();
  } catch (error) {
    await stop();
    throw error;
  }
  return { cluster, containerd, network, stop };
}
