/**
 * Robustness under API faults: a 100-pod sidecar burst (daemon on the host) and a 100-pod ambient
 * burst (daemon in a scratch node netns, fake ztunnel), each with a fault-injecting proxy between
 * the daemon and the API that resets 10 % of requests (half after the server acted), answers 5 %
 * with 429 `Retry-After: 1` and 5 % with 503, watch events held back so every pod is read directly.
 * The ADDs answered 11 are retried as kubelet does (up to 10 times, 200 ms apart). Reports the ADDs
 * attempted, succeeded, answered 11 (and retried) and failed otherwise (with the first such CNI
 * code and message), and the faults the proxy injected. Run alone with `node bench/robustness.ts`.
 */
import { fileURLToPath } from 'node:url';
import { addPodNetns, type PodNetns } from '../test/support/addPodNetns.ts';
import { ambientPodObject, createAmbientNode, type PodSandbox } from '../test/support/ambientNode.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from '../test/support/ambientRig.ts';
import { PLUGIN } from '../test/support/daemonProcess.ts';
import type { KubeObject } from '../test/support/fakeKubeApi.ts';
import type { FaultCounts, FaultProxy } from '../test/support/faultProxy.ts';
import { startFakeZtunnel, type FakeZtunnel } from '../test/support/fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject, sidecarPod } from '../test/support/meshPods.ts';
import { cniEnv, startAgentRig, type AgentRig, type PodAttachment } from '../test/support/startAgentRig.ts';
import { ProcessFailed, bounded, timeProcess } from './measure.ts';

const PATH_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
const PODS = 100;
const TRY_AGAIN = 11;
const KUBELET_RETRIES = 10;
const RATES = { reset: 0.05, resetAfterForward: 0.05, tooMany: 0.05, unavailable: 0.05 };

export interface RobustnessRow {
  scenario: string;
  pods: number;
  attempted: number;
  succeeded: number;
  /** ADDs answered 11 (each then retried). */
  tryAgain: number;
  failedOther: number;
  /** The first ADD that failed with anything but 11: its CNI code (or exit) and message. */
  firstOtherFailure?: string;
  /** Pods still not set up after the retries. */
  notSetUp: number;
  faults: { reset: number; resetAfterForward: number; tooMany: number; unavailable: number };
  faultedGets: number;
  faultedPatches: number;
}

interface Tally {
  attempted: number;
  succeeded: number;
  tryAgain: number;
  failedOther: number;
  firstOtherFailure?: string;
}

/** One plugin ADD; the outcome's CNI code (0 = success, -1 = no CNI error document) is tallied. */
async function addOnce(tally: Tally, pod: KubeObject, attachment: PodAttachment, conf: Record<string, unknown>): Promise<number> {
  tally.attempted++;
  try {
    await timeProcess([PLUGIN], { ...PATH_ENV, ...cniEnv('ADD', pod, attachment) }, JSON.stringify(conf));
    tally.succeeded++;
    return 0;
  } catch (err) {
    const code = err instanceof ProcessFailed ? (err.cniCode ?? -1) : -1;
    if (code === TRY_AGAIN) {
      tally.tryAgain++;
    } else {
      tally.failedOther++;
      tally.firstOtherFailure ??=
        err instanceof ProcessFailed && err.cniCode !== undefined
          ? `code ${err.cniCode}: ${err.cniMessage ?? ''}`
          : String(err).slice(0, 300);
    }
    return code;
  }
}

/**
 * Registers and ADDs every pod at once with watch events held back, then retries the 11s like
 * kubelet. Returns the tally and the number of pods that never succeeded.
 */
async function burstUnderFaults(
  proxy: FaultProxy,
  pods: { register(): KubeObject; attachment: PodAttachment; conf: Record<string, unknown> }[],
): Promise<{ tally: Tally; notSetUp: number; before: FaultCounts }> {
  const tally: Tally = { attempted: 0, succeeded: 0, tryAgain: 0, failedOther: 0 };
  const before = structuredClone(proxy.counts);
  proxy.setRates(RATES);
  proxy.holdWatches(true);
  let objects: KubeObject[] = [];
  let first: number[];
  try {
    objects = pods.map((p) => p.register());
    first = await Promise.all(pods.map((p, i) => addOnce(tally, objects[i] as KubeObject, p.attachment, p.conf)));
  } finally {
    proxy.holdWatches(false);
  }
  let notSetUp = 0;
  try {
    for (const [i, p] of pods.entries()) {
      let code = first[i];
      for (let n = 0; code === TRY_AGAIN && n < KUBELET_RETRIES; n++) {
        await new Promise((r) => setTimeout(r, 200));
        code = await addOnce(tally, objects[i] as KubeObject, p.attachment, p.conf);
      }
      if (code !== 0) notSetUp++;
    }
  } finally {
    proxy.setRates({});
  }
  return { tally, notSetUp, before };
}

function row(scenario: string, proxy: FaultProxy, result: { tally: Tally; notSetUp: number; before: FaultCounts }): RobustnessRow {
  const c = proxy.counts;
  const b = result.before;
  const faulted = (m: string) => (c.faultsByMethod[m] ?? 0) - (b.faultsByMethod[m] ?? 0);
  return {
    scenario,
    pods: PODS,
    ...result.tally,
    notSetUp: result.notSetUp,
    faults: {
      reset: c.reset - b.reset,
      resetAfterForward: c.resetAfterForward - b.resetAfterForward,
      tooMany: c.tooMany - b.tooMany,
      unavailable: c.unavailable - b.unavailable,
    },
    faultedGets: faulted('GET'),
    faultedPatches: faulted('PATCH'),
  };
}

async function sidecarUnderFaults(): Promise<RobustnessRow> {
  let rig: AgentRig | undefined;
  const created: PodNetns[] = [];
  try {
    rig = await bounded('robustness: start the sidecar agent rig', 60_000, () => startAgentRig({}, { viaFaultProxy: true }));
    const r = rig;
    r.api.upsertNamespace(namespaceObject('bench-faults'));
    const pods = Array.from({ length: PODS }, (_, i) => {
      const netns = addPodNetns('bfault', i);
      created.push(netns);
      const pod = sidecarPod('bench-faults', `fault-${i}`);
      const attachment = { netns: netns.path, containerId: `bfault${i}`, address: netns.address, gateway: netns.gateway };
      return {
        register: () => {
          r.api.upsertPod(pod);
          return pod;
        },
        attachment,
        conf: r.pluginConf(attachment),
      };
    });
    const result = await bounded('robustness: sidecar burst under faults', 300_000, () => burstUnderFaults(r.proxy!, pods));
    return row('sidecar, 100 pods', r.proxy!, result);
  } finally {
    for (const ns of created) ns.remove();
    await bounded('robustness: stop the sidecar agent rig', 60_000, async () => rig?.close());
  }
}

async function ambientUnderFaults(): Promise<RobustnessRow> {
  const node = createAmbientNode();
  let rig: AmbientRig | undefined;
  let ztunnel: FakeZtunnel | undefined;
  try {
    rig = await bounded('robustness: start the ambient rig', 60_000, async () => {
      const started = await startAmbientRig(node.netns.path, {}, { viaFaultProxy: true });
      await started.startDaemon();
      return started;
    });
    const r = rig;
    r.api.upsertNamespace(namespaceObject('bench-amb-faults', { [AMBIENT_LABEL]: 'ambient' }));
    const zt = await startFakeZtunnel({ path: r.ztunnelPath });
    ztunnel = zt;
    await zt.waitFor(() => zt.snapshots[0] === 1, 'the first snapshot', 30_000);
    const sandboxes: PodSandbox[] = [];
    for (let i = 0; i < PODS; i++) sandboxes.push(await node.addPod('bench-amb-faults', `fault-${i}`, i, { pause: false }));
    const pods = sandboxes.map((s) => {
      const pod = ambientPodObject(s);
      const attachment = attachmentOf(s);
      return {
        register: () => {
          r.api.upsertPod(pod);
          return pod;
        },
        attachment,
        conf: r.pluginConf(attachment),
      };
    });
    const result = await bounded('robustness: ambient burst under faults', 300_000, () => burstUnderFaults(r.proxy!, pods));
    for (const s of sandboxes) {
      const adds = zt.log.filter((l) => l === `add:${s.uid}`).length - zt.log.filter((l) => l === `del:${s.uid}`).length;
      if (adds !== 1 && result.notSetUp === 0) throw new Error(`robustness: ${s.name} has ${adds} net Adds at ztunnel, want 1`);
    }
    return row('ambient, 100 pods', r.proxy!, result);
  } finally {
    ztunnel?.close();
    await bounded('robustness: stop the ambient rig', 60_000, async () => rig?.close());
    await bounded('robustness: remove the ambient node', 60_000, () => node.remove());
  }
}

export async function benchRobustness(): Promise<RobustnessRow[] | undefined> {
  if (process.getuid?.() !== 0) {
    console.log('\n(skipping the robustness benchmark: needs root for network namespaces)');
    return undefined;
  }
  const rows = [await sidecarUnderFaults(), await ambientUnderFaults()];
  console.log('\n## Robustness: ADD bursts with API faults (10 % resets, 5 % 429 Retry-After: 1, 5 % 503), 11s retried like kubelet\n');
  console.log(
    '| scenario | ADDs attempted | succeeded | answered 11 (retried) | failed other | pods not set up | faults: reset / reset after forward / 429 / 503 | faulted GETs / PATCHes |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    console.log(
      `| ${r.scenario} | ${r.attempted} | ${r.succeeded} | ${r.tryAgain} | ${r.failedOther} | ${r.notSetUp} | ` +
        `${r.faults.reset} / ${r.faults.resetAfterForward} / ${r.faults.tooMany} / ${r.faults.unavailable} | ${r.faultedGets} / ${r.faultedPatches} |`,
    );
  }
  for (const r of rows)
    if (r.firstOtherFailure !== undefined) console.log(`\n${r.scenario}: first ADD failing with other than 11: ${r.firstOtherFailure}`);
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await benchRobustness();
}
