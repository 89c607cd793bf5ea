/**
 * Cost of continuous verification for ambient pods: one pass over 110 ambient pods, each a real
 * netns joined to a scratch node netns and holding the ambient in-pod rules, its IP in the node's
 * probe set under its UID, checked through the agent's own `createAmbientVerifier` (in-pod rules
 * through the held netns fd, probe-set membership, ztunnel's ack, the annotation), per backend.
 * The pass runs on a clock that moves 60 s / pods per pod, as the agent spreads a pass over the
 * interval; each pass starts with `targets()`, so it takes one probe-set listing as in the agent.
 * "generation unchanged" rows use the agent's shortcuts (nf_tables generation, legacy tables
 * fingerprint). Same figures as `verifyPass.ts`. Run alone with `node bench/verifyAmbientPass.ts` (PODS, PASSES).
 */
import { ambientConfigFromOptions, type Namespace, parseEnablementSelectors, type Pod } from '@istio-cni/capture';
import {
  type AmbientRuleBackend,
  applyAmbientPodRules,
  createExecCommandRunner,
  createIpsetProbeSets,
  createLegacyTablesFingerprinter,
  createNftGenerationReader,
  createNftProbeSets,
  createPodNetnsCache,
  createScratchNetnsOpener,
  decideIptablesBackend,
  openNetnsHandle,
} from '@istio-cni/dataplane';
import { createAmbientVerifier } from '../packages/install-cni/src/ambient/ambientVerifier.ts';
import { ambientPodObject, createAmbientNode, type PodSandbox } from '../test/support/ambientNode.ts';
import { AMBIENT_LABEL, DEFAULT_ENABLEMENT_SELECTORS, namespaceObject } from '../test/support/meshPods.ts';
import { INTERVAL_MS, measurePasses, printVerifyPass, timePass, type VerifyPassSample } from './verifyPass.ts';

const NAMESPACE = 'bench-verify';

export async function benchVerifyAmbientPass(pods = 110, passes = 5): Promise<VerifyPassSample[]> {
  const runner = createExecCommandRunner();
  const rules = { runner, openScratchNetns: createScratchNetnsOpener() };
  const config = ambientConfigFromOptions({ reconcile: true });
  const backends = [
    { name: 'iptables-nft (generation unchanged)', binary: 'nft', generations: true },
    { name: 'iptables-nft (read every pass)', binary: 'nft', generations: false },
    { name: 'iptables-legacy (fingerprint unchanged)', binary: 'legacy', generations: true },
    { name: 'iptables-legacy (read every pass)', binary: 'legacy', generations: false },
    { name: 'nft (generation unchanged)', generations: true },
    { name: 'nft (read every pass)', generations: false },
  ];
  const namespace = namespaceObject(NAMESPACE, { [AMBIENT_LABEL]: 'ambient' }) as unknown as Namespace;
  const samples: VerifyPassSample[] = [];
  for (const b of backends) {
    const node = createAmbientNode();
    const cache = createPodNetnsCache();
    try {
      const backend: AmbientRuleBackend =
        b.binary === undefined
          ? { kind: 'nft' }
          : {
              kind: 'iptables',
              iptables: (await decideIptablesBackend(runner, { forceBinary: b.binary, netns: node.netns.path })).backend,
            };
      const setsOptions = { runner, config, netns: node.netns.path };
      const sets = backend.kind === 'nft' ? createNftProbeSets(setsOptions) : createIpsetProbeSets(setsOptions);
      await sets.create();
      const byName = new Map<string, Pod>();
      for (let i = 0; i < pods; i++) {
        const sandbox: PodSandbox = await node.addPod(NAMESPACE, `verify-${i}`, i, { pause: false });
        const object = ambientPodObject(sandbox);
        object.metadata.annotations = { 'ambient.istio.io/redirection': 'enabled' };
        const pod = object as unknown as Pod;
        byName.set(sandbox.name, pod);
        const netns = cache.upsert(
          sandbox.uid,
          { name: sandbox.name, namespace: NAMESPACE, serviceAccount: `sa-${sandbox.name}` },
          openNetnsHandle(sandbox.netns.path),
        );
        await applyAmbientPodRules(rules, { netns, config, backend, reconcile: true });
        await sets.addPod(sandbox.uid, [sandbox.ip]);
      }
      let clock = 0;
      const verifier = createAmbientVerifier({
        view: {
          getPod: (_ns, name) => byName.get(name),
          getNamespace: (name) => (name === NAMESPACE ? namespace : undefined),
          listPods: () => [...byName.values()],
        },
        policy: {
          selectors: parseEnablementSelectors(DEFAULT_ENABLEMENT_SELECTORS),
          excludeNamespaces: [],
          systemNamespace: 'istio-system',
        },
        cache,
        rules,
        backend,
        config,
        sets,
        ztunnel: { hasPod: () => true, podAdded: async () => undefined },
        annotator: { annotate: async () => undefined },
        enrol: async (pod) => {
          throw new Error(`every pod is enrolled by the bench: ${pod.metadata.name} was not`);
        },
        ...(b.generations ? { nftGenerations: createNftGenerationReader(), legacyFingerprints: createLegacyTablesFingerprinter() } : {}),
        now: () => clock,
      });
      const pass = () =>
        timePass(verifier.targets(), async (target) => {
          clock += INTERVAL_MS / pods;
          return (await verifier.verify(target)).status !== 'ok';
        });
      // The warm-up pass records the generations.
      samples.push(await measurePasses(b.name, pods, passes, pass));
      await sets.destroy();
    } finally {
      cache.closeAll();
      await node.remove();
    }
  }
  return samples;
}

if (import.meta.main) {
  printVerifyPass('ambient', await benchVerifyAmbientPass(Number(process.env.PODS ?? 110), Number(process.env.PASSES ?? 5)));
}
