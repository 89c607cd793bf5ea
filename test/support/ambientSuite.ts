import { after, before } from 'node:test';
import { createAmbientNode, type AmbientNode, type PodSandbox } from './ambientNode.ts';
import { startAmbientRig, type AmbientRig } from './ambientRig.ts';
import { startFakeKubelet, type FakeKubelet } from './fakeKubelet.ts';
import { startFakeZtunnel, type FakeZtunnel } from './fakeZtunnel.ts';
import { AMBIENT_LABEL, namespaceObject } from './meshPods.ts';

export interface AmbientSuite {
  node: AmbientNode;
  rig: AmbientRig;
  ztunnel: FakeZtunnel;
}

/**
 * For the describe block it is called in: a scratch node, the ambient daemon running in it (ready),
 * namespace `namespace` labelled for ambient, a fake ztunnel connected (its first snapshot taken), and
 * with native nftables a fake kubelet (its uid is what the host probe rule matches); all stopped after
 * the block. `pods` are the test's sandboxes by UID: the fake ztunnel checks each netns fd it is sent
 * against them. `daemonEnv` is read when the daemon starts. Returns the suite's getter.
 */
export function ambientSuite(
  namespace: string,
  backend: { name: string; env: Record<string, string> },
  pods: ReadonlyMap<string, PodSandbox>,
  options: { daemonEnv?: () => Record<string, string>; viaFaultProxy?: boolean } = {},
): () => AmbientSuite {
  let kubelet: FakeKubelet | undefined;
  let suite: AmbientSuite | undefined;
  let node: AmbientNode | undefined;
  let rig: AmbientRig | undefined;
  let ztunnel: FakeZtunnel | undefined;
  before(async () => {
    if (backend.name === 'nftables') kubelet = await startFakeKubelet(4242);
    node = createAmbientNode();
    rig = await startAmbientRig(
      node.netns.path,
      { ...backend.env, ...options.daemonEnv?.() },
      options.viaFaultProxy ? { viaFaultProxy: true } : {},
    );
    await rig.startDaemon();
    rig.api.upsertNamespace(namespaceObject(namespace, { [AMBIENT_LABEL]: 'ambient' }));
    const z = await startFakeZtunnel({ path: rig.ztunnelPath, expectedNetns: (uid) => pods.get(uid)?.netns.path });
    ztunnel = z;
    await z.waitFor(() => z.snapshots[0] === 1, 'the first snapshot');
    suite = { node, rig, ztunnel: z };
  });
  after(async () => {
    ztunnel?.close();
    await rig?.close();
    await node?.remove();
    await kubelet?.stop();
  });
  return () => {
    if (suite === undefined) throw new Error('the ambient suite did not start');
    return suite;
  };
}

/** The ambient rule backends each kernel suite runs on, with the probe-set kind each uses. */
export const AMBIENT_BACKENDS = [
  { name: 'iptables', env: {}, sets: 'ipset' },
  { name: 'nftables', env: { NATIVE_NFTABLES: 'true' }, sets: 'nft' },
] as const;
