// `scripts/cluster/pod-exec NAMESPACE/POD -- COMMAND...`: runs COMMAND (this machine's binary, e.g.
// iptables-save, nft list ruleset, ss -ltn) in the network namespace of a pod of the `make up`
// cluster. The pod's node comes from the API, its ready sandbox from that node's containerd, and the
// netns from the sandbox process, whose pid is one of the node's PID namespace.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeKubeClient } from '../support/kubeClient.ts';
import { runCommand } from '../support/runCommand.ts';
import { isRunning } from './detached.ts';
import { CLUSTER_DIR, KUBECONFIG_FILE } from './layout.ts';
import { nodeProcPath, recordedHolder } from './node.ts';
import { loadState } from './state.ts';

const USAGE = 'usage: scripts/cluster/pod-exec NAMESPACE/POD -- COMMAND [ARG...]';

interface Kubeconfig {
  clusters: { cluster: { server: string; 'certificate-authority': string } }[];
  users: { user: { token: string } }[];
}

async function podNetnsPath(namespace: string, name: string): Promise<string> {
  const state = loadState();
  if (state === undefined) throw new Error(`no cluster is up (${join(CLUSTER_DIR, 'state.json')} is missing): run \`make up\``);
  const config = JSON.parse(readFileSync(KUBECONFIG_FILE, 'utf8')) as Kubeconfig;
  const cluster = config.clusters[0]?.cluster;
  const token = config.users[0]?.user.token;
  if (cluster === undefined || token === undefined) throw new Error(`${KUBECONFIG_FILE} names no cluster or token`);
  const api = makeKubeClient(cluster.server, readFileSync(cluster['certificate-authority'], 'utf8'), token);
  const pod = await api.must<{ spec: { nodeName?: string } }>('GET', `/api/v1/namespaces/${namespace}/pods/${name}`);
  const nodeName = pod.spec.nodeName;
  if (nodeName === undefined) throw new Error(`pod ${namespace}/${name} is not scheduled on a node yet`);
  const holder = recordedHolder(state, nodeName);
  if (holder === undefined || !isRunning(holder)) throw new Error(`${nodeName}'s namespace holder is not running`);

  const crictl = [join(state.rigBin, 'crictl'), '--config', join(CLUSTER_DIR, nodeName, 'containerd/crictl.yaml')];
  const listed = await runCommand([...crictl, 'pods', '--namespace', namespace, '--name', `^${name}$`, '--state', 'ready', '-q']);
  const sandboxes = listed.stdout.split('\n').filter(Boolean);
  if (sandboxes.length !== 1 || sandboxes[0] === undefined) {
    throw new Error(`${nodeName}: ${sandboxes.length} ready sandboxes of ${namespace}/${name} (expected 1)`);
  }
  const inspected = JSON.parse((await runCommand([...crictl, 'inspectp', sandboxes[0]])).stdout) as { info?: { pid?: number } };
  const pid = inspected.info?.pid;
  if (pid === undefined || pid <= 0) throw new Error(`${nodeName}: sandbox ${sandboxes[0]} reports no process`);
  return `${nodeProcPath(holder.pid, pid)}/ns/net`;
}

const [target, separator, ...command] = process.argv.slice(2);
const [namespace, name, ...rest] = (target ?? '').split('/');
if (
  namespace === undefined ||
  name === undefined ||
  namespace === '' ||
  name === '' ||
  rest.length > 0 ||
  separator !== '--' ||
  command.length === 0
) {
  console.error(USAGE);
  process.exit(2);
}
try {
  const netns = await podNetnsPath(namespace, name);
  const result = spawnSync('nsenter', [`--net=${netns}`, '--', ...command], { stdio: 'inherit' });
  if (result.error !== undefined) throw result.error;
  process.exitCode = result.status ?? 1;
} catch (error) {
  console.error(`pod-exec ${namespace}/${name}: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
