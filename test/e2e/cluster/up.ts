// `make up`: a local Kubernetes cluster on this machine (etcd, kube-apiserver, controller-manager,
// scheduler on the host; per node a netns + mount namespace with containerd and kubelet, Debian's
// bridge as primary CNI), the node image imported into every containerd, the chart from manifests/
// installed with it. `make down` undoes it all.
import { existsSync, mkdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { CHART_DIR, RELEASE_NAME, RELEASE_NAMESPACE } from '../support/chart.ts';
import { REPO_ROOT, rigBinary, type RigBinary } from '../support/rigPaths.ts';
import { runCommand } from '../support/runCommand.ts';
import { startControlPlane, type ControlPlane } from './controlPlane.ts';
import { writeExamples } from './examples.ts';
import { CLUSTER_DIR, KUBECONFIG_FILE, MAX_NODES, nodeLayout } from './layout.ts';
import { createNodeBridge, createNodeNetns, routePodCidrs } from './network.ts';
import { startNode, waitNodeReady, type RunningNode } from './node.ts';
import { writeBusyboxImage } from './ociImage.ts';
import { emptyState, loadState, saveState } from './state.ts';

const WORKLOAD_IMAGE = 'localhost/istio-cni-cluster/busybox:v1';
const DAEMONSET = 'istio-cni-node';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1' },
    image: { type: 'string' },
    'image-tar': { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
  },
});
const nodeCount = Number(values.nodes);
if (!Number.isInteger(nodeCount) || nodeCount < 1 || nodeCount > MAX_NODES) throw new Error(`NODES must be 1..${MAX_NODES}, not ${values.nodes}`);
const image = values.image;
if (image === undefined || !/^[^:\s]+(:[\w.-]+)?$/.test(image)) throw new Error(`--image must be an image reference, not ${String(image)}`);
const imageTar = resolve(REPO_ROOT, values['image-tar'] ?? 'dist/image.oci.tar');

const elapsed = (since: number) => `${((Date.now() - since) / 1000).toFixed(1)} s`;
const step = (what: string) => console.log(`==> ${what}`);

if (loadState() !== undefined) {
  console.error(`a cluster is up (${relative(REPO_ROOT, CLUSTER_DIR)}/state.json): run \`make down\` first`);
  process.exit(1);
}
if (process.getuid?.() !== 0) {
  console.error('make up needs root (network namespaces, mounts, cgroups, containerd)');
  process.exit(1);
}
if (!existsSync(imageTar)) {
  console.error(`node image archive ${relative(REPO_ROOT, imageTar)} is missing: run \`make image\` (or set IMAGE_TAR)`);
  process.exit(1);
}
const needed: RigBinary[] = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet', 'crictl', 'helm', 'pause-image.tar'];
for (const b of needed) rigBinary(b);

const started = Date.now();
const state = emptyState();
saveState(state);
try {
  const nodes = Array.from({ length: nodeCount }, (_, i) => nodeLayout(i + 1));
  step(`node network (${nodes.map((n) => `${n.name} ${n.ip} pods ${n.podCidr}`).join(', ')})`);
  await createNodeBridge(state);
  for (const node of nodes) await createNodeNetns(state, node);
  await routePodCidrs(nodes);

  step('control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)');
  const controlPlane = await startControlPlane(state, nodes);

  const imagesDir = join(CLUSTER_DIR, 'images');
  mkdirSync(imagesDir, { recursive: true });
  const workloadTar = join(imagesDir, 'busybox.oci.tar');
  await writeBusyboxImage(WORKLOAD_IMAGE, workloadTar);

  const running: RunningNode[] = [];
  for (const node of nodes) {
    step(`${node.name}: containerd (importing ${relative(REPO_ROOT, imageTar)}, the pause and workload images), kubelet`);
    running.push(await startNode(state, node, controlPlane, [imageTar, workloadTar]));
  }
  for (const node of running) {
    await requireImage(node, image);
    await waitNodeReady(controlPlane, node);
  }
  console.log(`    ${nodeCount} node(s) Ready after ${elapsed(started)}`);

  step(`helm install ${RELEASE_NAME} (${relative(REPO_ROOT, CHART_DIR)}) with ${image}, pullPolicy Never`);
  await helmInstall(image, values.set ?? []);
  await waitDaemonSetReady(controlPlane, nodeCount);

  const examples = writeExamples(WORKLOAD_IMAGE);
  console.log(`\ncluster up in ${elapsed(started)}: ${nodeCount} node(s), DaemonSet ${RELEASE_NAMESPACE}/${DAEMONSET} Ready.\n`);
  console.log(`  export KUBECONFIG=${KUBECONFIG_FILE}`);
  console.log('  kubectl get nodes,pods -A -o wide\n');
  for (const e of examples) console.log(`  ${e.command}\n    # ${e.look}\n`);
  console.log(`Logs: ${relative(REPO_ROOT, CLUSTER_DIR)}/{control-plane,node-*/logs}/*.log. Remove everything with \`make down\`.`);
} catch (error) {
  console.error(`\nmake up failed after ${elapsed(started)}: ${error instanceof Error ? error.message : String(error)}`);
  console.error('What was created is recorded in .cluster/state.json; `make down` removes it.');
  process.exitCode = 1;
}

/** `ctr import` names the image from the archive; the chart must find it under exactly `image`. */
async function requireImage(node: RunningNode, ref: string): Promise<void> {
  const listed = await runCommand(['ctr', '--address', node.containerdSocket, '--namespace', 'k8s.io', 'images', 'ls', '-q']);
  const refs = listed.stdout.split('\n').filter(Boolean);
  // containerd spells a bare Docker Hub reference in full.
  if (!refs.includes(ref) && !refs.includes(`docker.io/${ref}`)) {
    throw new Error(`${node.layout.name}: ${relative(REPO_ROOT, imageTar)} did not import as ${ref} (images: ${refs.filter((r) => !r.startsWith('sha256:')).join(', ')}); set IMAGE to its name`);
  }
}

async function helmInstall(ref: string, extraSet: readonly string[]): Promise<void> {
  const helmHome = join(CLUSTER_DIR, 'helm');
  const env = {
    ...process.env,
    KUBECONFIG: KUBECONFIG_FILE,
    HELM_CACHE_HOME: join(helmHome, 'cache'),
    HELM_CONFIG_HOME: join(helmHome, 'config'),
    HELM_DATA_HOME: join(helmHome, 'data'),
  };
  const sets = [`image=${ref}`, 'pullPolicy=Never', ...extraSet].flatMap((s) => ['--set', s]);
  await runCommand([rigBinary('helm'), 'install', RELEASE_NAME, CHART_DIR, '--namespace', RELEASE_NAMESPACE, '--create-namespace', ...sets],
    { env, timeoutMs: 120_000 });
}

interface DaemonSetStatus {
  metadata: { generation?: number };
  status?: { observedGeneration?: number; desiredNumberScheduled?: number; numberReady?: number; updatedNumberScheduled?: number };
}

async function waitDaemonSetReady(controlPlane: ControlPlane, expected: number, timeoutMs = 300_000): Promise<void> {
  const path = `/apis/apps/v1/namespaces/${RELEASE_NAMESPACE}/daemonsets/${DAEMONSET}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ds = await controlPlane.api.must<DaemonSetStatus>('GET', path);
    const s = ds.status ?? {};
    if ((s.observedGeneration ?? 0) >= (ds.metadata.generation ?? 1) && s.desiredNumberScheduled === expected && s.numberReady === expected
      && s.updatedNumberScheduled === expected) {
      return;
    }
    if (Date.now() > deadline) {
      const pods = await controlPlane.api.request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/pods`);
      const events = await controlPlane.api.request('GET', `/api/v1/namespaces/${RELEASE_NAMESPACE}/events`);
      throw new Error(`DaemonSet ${DAEMONSET} not Ready (${JSON.stringify(s)})\npods: ${pods.text.slice(0, 4000)}\nevents: ${events.text.slice(0, 4000)}`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
