/**
 * An ambient node verifying every second (plus `env`): a scratch node netns, `dist/install-cni` with
 * ambient on in it, a fake ztunnel and a pod with a real pause process enrolled through the built
 * plugin in namespace `ns` (labelled for ambient). `netnsOf` says where ztunnel should find each
 * pod's netns (a test that moves a pod updates it).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createAmbientNode, ambientPodObject, type AmbientNode, type PodSandbox } from './ambientNode.ts';
import { attachmentOf, startAmbientRig, type AmbientRig } from './ambientRig.ts';
import { startFakeKubelet, type FakeKubelet } from './fakeKubelet.ts';
import { startFakeZtunnel, type FakeZtunnel } from './fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from './meshPods.ts';

export interface VerifyingAmbient {
  node: AmbientNode;
  rig: AmbientRig;
  ztunnel: FakeZtunnel;
  /** The pod enrolled at start. */
  pod: PodSandbox;
  /** Pod UID → the netns path ztunnel should be given. */
  netnsOf: Map<string, string>;
  /** `istio_cni_drift_total{kind,action}` now. */
  driftCount(kind: string, action: string): Promise<number>;
  /** The first 'pod drifted from its plan' line of `pod` (`namespace/name`) naming drift `kind` (and with `action`). */
  /** The first drift line for the pod of that kind (and action; its drift matching `detail`), logged or to come. */
  driftLine(pod: string, kind: string, action?: string, detail?: RegExp): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

/** Runs `argv` in the netns; false when it fails. */
export function inNetns(netns: string, argv: string[]): boolean {
  try {
    execFileSync('nsenter', [`--net=${netns}`, '--', ...argv], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

export async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `nativeNftables`: a fake kubelet answers the probe the host rules are checked with. */
export async function startVerifyingAmbient(ns: string, env: Record<string, string>, nativeNftables: boolean): Promise<VerifyingAmbient> {
  let kubelet: FakeKubelet | undefined;
  let node: AmbientNode | undefined;
  let rig: AmbientRig | undefined;
  let ztunnel: FakeZtunnel | undefined;
  const close = async () => {
    ztunnel?.close();
    await rig?.close();
    await node?.remove();
    await kubelet?.stop();
  };
  try {
    if (nativeNftables) kubelet = await startFakeKubelet(4242);
    node = createAmbientNode();
    rig = await startAmbientRig(node.netns.path, { VERIFY_INTERVAL: '1s', ...env });
    await rig.startDaemon();
    rig.api.upsertNamespace(namespaceObject(ns, { [AMBIENT_LABEL]: 'ambient' }));
    const netnsOf = new Map<string, string>();
    ztunnel = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => netnsOf.get(uid) });
    const z = ztunnel;
    await z.waitFor(() => z.snapshots[0] === 1, 'the first snapshot');
    const pod = await node.addPod(ns, 'app-0', 0);
    netnsOf.set(pod.uid, pod.netns.path);
    rig.api.upsertPod(ambientPodObject(pod));
    const res = await rig.exec('ADD', rig.api.getPod(ns, pod.name)!, attachmentOf(pod));
    assert.equal(res.code, 0, `ADD: ${res.stdout}${res.stderr}`);
    const r = rig;
    await until(
      'annotation enabled',
      () => r.api.getPod(ns, pod.name)?.metadata.annotations?.['ambient.istio.io/redirection'] === 'enabled',
    );
    return {
      node,
      rig,
      ztunnel,
      pod,
      netnsOf,
      async driftCount(kind, action) {
        const { body } = await r.get('metrics', '/metrics');
        const line = body
          .split('\n')
          .find((l) => l.startsWith('istio_cni_drift_total{') && l.includes(`kind="${kind}"`) && l.includes(`action="${action}"`));
        return line === undefined ? 0 : Number(line.split(' ').at(-1));
      },
      driftLine: (podName, kind, action, detail) =>
        r.daemon.waitForLog(
          (e) =>
            e.msg === 'pod drifted from its plan' &&
            e.pod === podName &&
            JSON.stringify(e.drift).includes(`"${kind}"`) &&
            (action === undefined || e.action === action) &&
            (detail === undefined || detail.test(JSON.stringify(e.drift))),
          30_000,
        ),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
