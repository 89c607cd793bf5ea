import { runCommand } from '../support/runCommand.ts';
import { CONTROL_PLANE_IP, NODE_BRIDGE, NODE_NETWORK_PREFIX, type NodeLayout } from './layout.ts';
import { saveState, type ClusterState } from './state.ts';

/**
 * The node network: a host bridge carrying the control plane's address (the kernel here has no dummy
 * links, and the API server must listen on an address a node's netns can reach).
 */
export async function createNodeBridge(state: ClusterState): Promise<void> {
  await runCommand(['ip', 'link', 'add', NODE_BRIDGE, 'type', 'bridge']);
  state.links.push(NODE_BRIDGE);
  saveState(state);
  await runCommand(['ip', 'addr', 'add', `${CONTROL_PLANE_IP}/${NODE_NETWORK_PREFIX}`, 'dev', NODE_BRIDGE]);
  await runCommand(['ip', 'link', 'set', NODE_BRIDGE, 'up']);
}

/** The node's netns, wired to the bridge by a veth (`eth0` inside), default route via the control plane's address. */
export async function createNodeNetns(state: ClusterState, node: NodeLayout): Promise<void> {
  await runCommand(['ip', 'netns', 'add', node.netns]);
  state.netns.push(node.netns);
  saveState(state);
  await runCommand(['ip', 'link', 'add', node.hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node.netns]);
  state.links.push(node.hostVeth);
  saveState(state);
  await runCommand(['ip', 'link', 'set', node.hostVeth, 'master', NODE_BRIDGE, 'up']);
  const inNode = ['ip', '-n', node.netns];
  await runCommand([...inNode, 'link', 'set', 'lo', 'up']);
  await runCommand([...inNode, 'addr', 'add', `${node.ip}/${NODE_NETWORK_PREFIX}`, 'dev', 'eth0']);
  await runCommand([...inNode, 'link', 'set', 'eth0', 'up']);
  await runCommand([...inNode, 'route', 'add', 'default', 'via', CONTROL_PLANE_IP]);
  // The API server answers pods (their source is the pod IP: no masquerade) through this route.
  await runCommand(['ip', 'route', 'add', node.podCidr, 'via', node.ip, 'dev', NODE_BRIDGE]);
}

/** Pod CIDRs routed node to node over the bridge, the way a routed (non-overlay) cluster network does. */
export async function routePodCidrs(nodes: readonly NodeLayout[]): Promise<void> {
  for (const from of nodes) {
    for (const to of nodes) {
      if (from === to) continue;
      await runCommand(['ip', '-n', from.netns, 'route', 'add', to.podCidr, 'via', to.ip, 'dev', 'eth0']);
    }
  }
}
