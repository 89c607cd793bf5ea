import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from '../support/rigPaths.ts';

/** Everything `make up` creates on disk lives here (git-ignored); `make down` removes it. */
export const CLUSTER_DIR = join(REPO_ROOT, '.cluster');
export const STATE_FILE = join(CLUSTER_DIR, 'state.json');
export const KUBECONFIG_FILE = join(CLUSTER_DIR, 'kubeconfig');

// The node network: a host bridge carrying the control plane's address, one veth per node.
export const NODE_BRIDGE = 'istiocni-nodes';
export const CONTROL_PLANE_IP = '10.241.0.1';
export const NODE_NETWORK_PREFIX = 24;
export const APISERVER_PORT = 6443;
export const SERVICE_CIDR = '10.96.0.0/16';
/** The `kubernetes` Service's ClusterIP; without kube-proxy each node DNATs it to the API server. */
export const KUBERNETES_SERVICE_IP = '10.96.0.1';
export const CLUSTER_CIDR = '10.242.0.0/16';
export const MAX_NODES = 9;

/**
 * The `cniVersion` of each node's primary conflist (`E2E_PRIMARY_CNI_VERSION`, default 1.0.0). With
 * 1.1.0, containerd 2.x runs every plugin of the list for STATUS on each CRI status check (kubelet's
 * runtime status, every few seconds), the reference plugins and `istio-cni` included.
 */
export const PRIMARY_CNI_VERSION = primaryCniVersion(process.env.E2E_PRIMARY_CNI_VERSION);

export function primaryCniVersion(value: string | undefined): string {
  if (value === undefined || value === '') return '1.0.0';
  if (!/^\d+\.\d+\.\d+$/.test(value))
    throw new Error(`E2E_PRIMARY_CNI_VERSION=${value}: expected a CNI spec version such as 1.0.0 or 1.1.0`);
  return value;
}

export interface NodeLayout {
  index: number;
  name: string;
  /** The node's network namespace (`/run/netns/<netns>`). */
  netns: string;
  /** The host end of the node's veth, on NODE_BRIDGE. */
  hostVeth: string;
  ip: string;
  podCidr: string;
  dir: string;
  /** kubelet's cgroupRoot, created in every cgroup hierarchy before kubelet starts. */
  cgroupRoot: string;
}

export function nodeLayout(index: number): NodeLayout {
  const name = `node-${index}`;
  return {
    index,
    name,
    netns: `istio-cni-${name}`,
    hostVeth: `icn-${name}`,
    ip: `10.241.0.${10 + index}`,
    podCidr: `10.242.${index}.0/24`,
    dir: join(CLUSTER_DIR, name),
    cgroupRoot: `istio-cni-cluster-${name}`,
  };
}

const PACKAGE_VERSION = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
/** The node image the cluster suites run: `make e2e` passes mk/image.mk's IMAGE; its default is the same name. */
export const SUITE_IMAGE = process.env.IMAGE ?? `localhost/istio-cni/install-cni:${PACKAGE_VERSION}`;
export const SUITE_IMAGE_ARCHIVE = resolve(REPO_ROOT, process.env.IMAGE_ARCHIVE ?? 'dist/image.oci.tar');
