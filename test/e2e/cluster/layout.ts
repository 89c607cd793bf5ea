import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from '../support/rigPaths.ts';

/** Everything `make up` creates on disk lives here (git-ignored); `make down` removes it. */
export const CLUSTER_DIR = join(REPO_ROOT, '.cluster');
export const STATE_FILE = join(CLUSTER_DIR, 'state.json');
export const KUBECONFIG_FILE = join(CLUSTER_DIR, 'kubeconfig');
/** Which checkout's cluster holds the machine's cluster names (bridge, netns, veths, cgroups): test/e2e/support/hostClaim.ts. */
export const HOST_CLAIM_FILE = '/run/istio-cni-cluster.claim';

// The node network: a host bridge carrying the control plane's address, one veth per node. Each
// address family has its plan; a cluster of `IP_FAMILY` (ipv4, ipv6 or dual) takes one or both, its
// primary family first (dual: IPv4 first, as most dual-stack clusters run).
export const NODE_BRIDGE = 'istiocni-nodes';
export const APISERVER_PORT = 6443;

export type IpFamily = 'ipv4' | 'ipv6' | 'dual';
export const IP_FAMILIES: readonly IpFamily[] = ['ipv4', 'ipv6', 'dual'];

/** One family's address plan. */
export interface FamilyPlan {
  family: 4 | 6;
  /** The control plane's address on NODE_BRIDGE (the API server binds the primary family's). */
  controlPlaneIp: string;
  nodeNetworkPrefix: number;
  serviceCidr: string;
  /** The `kubernetes` Service's ClusterIP in this family; without kube-proxy each node DNATs it to the API server. */
  kubernetesServiceIp: string;
  nodeIp(index: number): string;
  podCidr(index: number): string;
  /** An address nothing in the cluster answers on (documentation range): only a capture rule makes a connection to it succeed. */
  nowhere: string;
}

export const IPV4_PLAN: FamilyPlan = {
  family: 4,
  controlPlaneIp: '10.241.0.1',
  nodeNetworkPrefix: 24,
  serviceCidr: '10.96.0.0/16',
  kubernetesServiceIp: '10.96.0.1',
  nodeIp: (index) => `10.241.0.${10 + index}`,
  podCidr: (index) => `10.242.${index}.0/24`,
  nowhere: '192.0.2.123',
};

/** Unique local addresses (fd00::/8); the service range is a /112, the widest kube-apiserver takes for IPv6. */
export const IPV6_PLAN: FamilyPlan = {
  family: 6,
  controlPlaneIp: 'fd00:10:241::1',
  nodeNetworkPrefix: 64,
  serviceCidr: 'fd00:10:96::/112',
  kubernetesServiceIp: 'fd00:10:96::1',
  nodeIp: (index) => `fd00:10:241::${10 + index}`,
  podCidr: (index) => `fd00:10:242:${index}::/64`,
  nowhere: '2001:db8::123',
};

/** `IP_FAMILY` (environment or `make up IP_FAMILY=`): ipv4 (default), ipv6 or dual. */
export function ipFamily(value: string | undefined): IpFamily {
  if (value === undefined || value === '') return 'ipv4';
  if (!(IP_FAMILIES as readonly string[]).includes(value)) throw new Error(`IP_FAMILY=${value}: expected one of ${IP_FAMILIES.join(', ')}`);
  return value as IpFamily;
}

/** The family plans of a cluster, primary first. */
export function familyPlans(family: IpFamily): FamilyPlan[] {
  if (family === 'ipv4') return [IPV4_PLAN];
  if (family === 'ipv6') return [IPV6_PLAN];
  return [IPV4_PLAN, IPV6_PLAN];
}

/** The cluster's address plan: its families, primary first. */
export interface ClusterAddressing {
  ipFamily: IpFamily;
  plans: FamilyPlan[];
  primary: FamilyPlan;
}

export function clusterAddressing(family: IpFamily = 'ipv4'): ClusterAddressing {
  const plans = familyPlans(family);
  const primary = plans[0];
  if (primary === undefined) throw new Error(`no address plan for ${family}`);
  return { ipFamily: family, plans, primary };
}

/** `host:port` of a URL, an IPv6 literal in brackets. */
export const hostPort = (ip: string, port: number): string => (ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`);

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
  /** The node's address of the primary family (kubelet's address). */
  ip: string;
  /** The node's pod CIDR of the primary family. */
  podCidr: string;
  /** One address per family, primary first (kubelet's --node-ip). */
  ips: string[];
  /** One pod CIDR per family, primary first (the Node's spec.podCIDRs, host-local's ranges). */
  podCidrs: string[];
  dir: string;
  /** kubelet's cgroupRoot, created in every cgroup hierarchy before kubelet starts. */
  cgroupRoot: string;
}

export function nodeLayout(index: number, addressing: ClusterAddressing = clusterAddressing()): NodeLayout {
  const name = `node-${index}`;
  const ips = addressing.plans.map((p) => p.nodeIp(index));
  const podCidrs = addressing.plans.map((p) => p.podCidr(index));
  return {
    index,
    name,
    netns: `istio-cni-${name}`,
    hostVeth: `icn-${name}`,
    ip: addressing.primary.nodeIp(index),
    podCidr: addressing.primary.podCidr(index),
    ips,
    podCidrs,
    dir: join(CLUSTER_DIR, name),
    cgroupRoot: `istio-cni-cluster-${name}`,
  };
}

const PACKAGE_VERSION = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
/** The node image the cluster suites run: `make e2e` passes mk/image.mk's IMAGE; its default is the same name. */
export const SUITE_IMAGE = process.env.IMAGE ?? `localhost/istio-cni/install-cni:${PACKAGE_VERSION}`;
export const SUITE_IMAGE_ARCHIVE = resolve(REPO_ROOT, process.env.IMAGE_ARCHIVE ?? 'dist/image.oci.tar');
