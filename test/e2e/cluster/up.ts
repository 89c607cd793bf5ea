// `make up`: a local Kubernetes cluster on this machine (etcd, kube-apiserver, controller-manager,
// scheduler on the host; per node a netns + mount namespace with containerd and kubelet, the rig's
// reference bridge as primary CNI), the node image imported into every containerd, the chart from manifests/
// installed with it. `make down` undoes it all.
import { relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { RELEASE_NAMESPACE } from '../support/chart.ts';
import { REPO_ROOT, RIG_BIN, rigBinary } from '../support/rigPaths.ts';
import { writeExamples } from './examples.ts';
import { CLUSTER_DIR, clusterAddressing, ipFamily, KUBECONFIG_FILE } from './layout.ts';
import { bringUp, DAEMONSET, WORKLOAD_IMAGE } from './localCluster.ts';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1' },
    image: { type: 'string' },
    'image-archive': { type: 'string', default: 'dist/image.oci.tar' },
    set: { type: 'string', multiple: true, default: [] },
    'ip-family': { type: 'string', default: 'ipv4' },
  },
});

const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
try {
  if (values.image === undefined) throw new Error('--image is required');
  const nodes = Number(values.nodes);
  const addressing = clusterAddressing(ipFamily(values['ip-family']));
  // What upstream's users set for an IPv6 or dual-stack cluster: ambient's IPv6 rules (the chart's default, said explicitly).
  const familySet = addressing.plans.some((p) => p.family === 6) ? ['ambient.ipv6=true'] : [];
  // The printed commands use the rig's kubectl, the cluster's version.
  rigBinary('kubectl');
  await bringUp({
    nodes,
    image: values.image,
    imageTar: resolve(REPO_ROOT, values['image-archive']),
    chartSet: [...familySet, ...values.set],
    ipFamily: addressing.ipFamily,
    log: (line) => console.log(`==> [${elapsed()}] ${line}`),
  });
  const ambient = values.set.some((s) => s === 'profile=ambient');
  const examples = writeExamples(WORKLOAD_IMAGE, DAEMONSET, ambient, addressing);
  console.log(`\ncluster up in ${elapsed()}: ${nodes} node(s), ${addressing.ipFamily}, DaemonSet ${RELEASE_NAMESPACE}/${DAEMONSET} Ready.`);
  console.log(`From ${REPO_ROOT}, with the rig's kubectl (the cluster's version), crictl and helm first on PATH:\n`);
  console.log(`  export PATH=${RIG_BIN}:$PATH`);
  console.log(`  export KUBECONFIG=${KUBECONFIG_FILE}`);
  console.log('  kubectl get nodes,pods -A -o wide\n');
  for (const e of examples) console.log(`  ${e.command}\n    # ${e.look}\n`);
  console.log(
    `Logs: ${relative(REPO_ROOT, CLUSTER_DIR)}/control-plane/*.log, ${relative(REPO_ROOT, CLUSTER_DIR)}/node-*/logs/*.log. Remove everything with \`make down\`.`,
  );
} catch (error) {
  console.error(`\nmake up failed after ${elapsed()}: ${error instanceof Error ? error.message : String(error)}`);
  console.error('Whatever was created is recorded in .cluster/state.json (if it exists); `make down` removes it.');
  process.exitCode = 1;
}
