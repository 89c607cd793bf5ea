import { existsSync, readdirSync } from 'node:fs';
import { runCommand } from '../support/runCommand.ts';
import { type ClusterAddressing, NODE_BRIDGE, type NodeLayout } from './layout.ts';
import { saveState, type ClusterState } from './state.ts';

// IPv6 addresses are added `nodad`: duplicate address detection would keep each one tentative (and
// unusable) for a second or two on links nothing else shares.
const familyArgs = (family: 4 | 6): string[] => (family === 6 ? ['-6'] : ['-4']);
const addressOptions = (family: 4 | 6): string[] => (family === 6 ? ['nodad'] : []);

/** `ip [-n netns] -4|-6 route add <dst> via <via> dev <dev>`; the host's table when netns is undefined. */
function addRoute(netns: string | undefined, family: 4 | 6, dst: string, via: string, dev: string): Promise<unknown> {
  return runCommand([
    'ip',
    ...(netns === undefined ? [] : ['-n', netns]),
    ...familyArgs(family),
    'route',
    'add',
    dst,
    'via',
    via,
    'dev',
    dev,
  ]);
}

/**
 * What carries the node network's names with no cluster's record behind it (left by a cluster
 * killed before it claimed the machine, or by a rig older than the claim): the caller holds the
 * claim, so nothing running owns them. Removed, each one logged.
 */
export async function removeUnclaimedNodeNetwork(log: (line: string) => void): Promise<void> {
  const links = readdirSync('/sys/class/net').filter((l) => l === NODE_BRIDGE || /^icn-node-\d+$/.test(l));
  const netns = existsSync('/run/netns') ? readdirSync('/run/netns').filter((n) => /^istio-cni-node-\d+$/.test(n)) : [];
  for (const n of netns) {
    log(`removing netns ${n}, which no cluster's record holds`);
    await runCommand(['ip', 'netns', 'delete', n]);
  }
  for (const l of links) {
    // A node's veth goes with its netns.
    if (!existsSync(`/sys/class/net/${l}`)) continue;
    log(`removing link ${l}, which no cluster's record holds`);
    await runCommand(['ip', 'link', 'delete', l]);
  }
}

/**
 * The node network: a host bridge carrying the control plane's address of each family (the kernel
 * here has no dummy links, and the API server must listen on an address a node's netns can reach).
 */
export async function createNodeBridge(state: ClusterState, addressing: ClusterAddressing): Promise<void> {
  await runCommand(['ip', 'link', 'add', NODE_BRIDGE, 'type', 'bridge']);
  state.links.push(NODE_BRIDGE);
  saveState(state);
  for (const plan of addressing.plans) {
    await runCommand([
      'ip',
      'addr',
      'add',
      `${plan.controlPlaneIp}/${plan.nodeNetworkPrefix}`,
      'dev',
      NODE_BRIDGE,
      ...addressOptions(plan.family),
    ]);
  }
  await runCommand(['ip', 'link', 'set', NODE_BRIDGE, 'up']);
}

/**
 * The node's netns, wired to the bridge by a veth (`eth0` inside): an address and a default route
 * via the control plane's address per family.
 */
export async function createNodeNetns(state: ClusterState, node: NodeLayout, addressing: ClusterAddressing): Promise<void> {
  await runCommand(['ip', 'netns', 'add', node.netns]);
  state.netns.push(node.netns);
  saveState(state);
  await runCommand(['ip', 'link', 'add', node.hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node.netns]);
  state.links.push(node.hostVeth);
  saveState(state);
  await runCommand(['ip', 'link', 'set', node.hostVeth, 'master', NODE_BRIDGE, 'up']);
  const inNode = ['ip', '-n', node.netns];
  await runCommand([...inNode, 'link', 'set', 'lo', 'up']);
  for (const plan of addressing.plans) {
    const ip = plan.nodeIp(node.index);
    await runCommand([...inNode, 'addr', 'add', `${ip}/${plan.nodeNetworkPrefix}`, 'dev', 'eth0', ...addressOptions(plan.family)]);
  }
  await runCommand([...inNode, 'link', 'set', 'eth0', 'up']);
  for (const plan of addressing.plans) {
    await runCommand([...inNode, ...familyArgs(plan.family), 'route', 'add', 'default', 'via', plan.controlPlaneIp]);
    // The API server answers pods (their source is the pod IP: no masquerade) through this route.
    await addRoute(undefined, plan.family, plan.podCidr(node.index), plan.nodeIp(node.index), NODE_BRIDGE);
  }
}

/** Pod CIDRs routed node to node over the bridge, per family, the way a routed (non-overlay) cluster network does. */
export async function routePodCidrs(nodes: readonly NodeLayout[], addressing: ClusterAddressing): Promise<void> {
  for (const from of nodes) {
    for (const to of nodes) {
      if (from === to) continue;
      for (const plan of addressing.plans) await addRoute(from.netns, plan.family, plan.podCidr(to.index), plan.nodeIp(to.index), 'eth0');
    }
  }
}
