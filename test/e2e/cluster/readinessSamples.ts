// What the STATUS scenarios sample: each Node's Ready condition as the API reports it and
// containerd's NetworkReady as `crictl info` on the node reports it (a CRI status call, which runs
// the CNI STATUS of every plugin of a 1.1.0 conflist), plus whether the plugin's kubeconfig is in
// the node's run dir.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { KubeClient } from '../support/kubeClient.ts';
import { nodePrivateDir, type RunningNode } from './node.ts';

/** The file the installer writes for degraded mode (packages/handoff/src/paths.ts PLUGIN_KUBECONFIG). */
const PLUGIN_KUBECONFIG = 'istio-cni-kubeconfig';

export interface ReadinessSample {
  /** When the sample's requests were sent (ms since the epoch). */
  at: number;
  node: string;
  /** The Node's Ready condition status: 'True', 'False', 'Unknown', or undefined (no answer). */
  ready: string | undefined;
  /** containerd's NetworkReady; undefined when its CRI did not answer (stopped). */
  networkReady: boolean | undefined;
  networkMessage: string;
  /** The plugin's kubeconfig in the node's run dir, looked at after `crictl info` answered. */
  kubeconfig: boolean;
}

export interface ReadinessSampler {
  /** Stops sampling once the sample in flight is done; every sample, in order. */
  stop(): Promise<ReadinessSample[]>;
}

interface NodeList {
  items: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } }[];
}
interface CriInfo {
  status?: { conditions?: { type: string; status: boolean; reason?: string; message?: string }[] };
}

/** Samples every node every `everyMs` (a round starts no sooner than the previous one ended). */
export function sampleReadiness(api: KubeClient, nodes: readonly RunningNode[], everyMs: number): ReadinessSampler {
  const samples: ReadinessSample[] = [];
  let stopping = false;
  const round = async () => {
    const at = Date.now();
    const [list, ...infos] = await Promise.all([
      api.request<NodeList>('GET', '/api/v1/nodes').catch(() => undefined),
      ...nodes.map((n) => n.crictl(['--timeout', '2s', 'info']).catch(() => undefined)),
    ]);
    for (const [i, node] of nodes.entries()) {
      const name = node.layout.name;
      const conditions = list?.status === 200 ? list.body.items.find((n) => n.metadata.name === name)?.status?.conditions : undefined;
      const info = infos[i];
      const network =
        info === undefined ? undefined : (JSON.parse(info) as CriInfo).status?.conditions?.find((c) => c.type === 'NetworkReady');
      samples.push({
        at,
        node: name,
        ready: conditions?.find((c) => c.type === 'Ready')?.status,
        networkReady: network?.status,
        networkMessage: network?.message ?? '',
        kubeconfig: existsSync(join(nodePrivateDir(node.layout, '/run/istio-cni'), PLUGIN_KUBECONFIG)),
      });
    }
    return Date.now() - at;
  };
  const running = (async () => {
    while (!stopping) {
      const took = await round();
      if (!stopping) await new Promise((r) => setTimeout(r, Math.max(0, everyMs - took)));
    }
  })();
  return {
    async stop() {
      stopping = true;
      await running;
      return samples;
    },
  };
}

/** A sample in which the node is not ready: the Node's Ready=False or containerd's NetworkReady=false. */
export const notReady = (s: ReadinessSample): boolean => s.ready === 'False' || s.networkReady === false;

/** One line per node: how many samples said what. */
export function summarizeSamples(samples: readonly ReadinessSample[]): string {
  const byNode = new Map<string, ReadinessSample[]>();
  for (const s of samples) byNode.set(s.node, [...(byNode.get(s.node) ?? []), s]);
  return [...byNode.entries()]
    .map(([node, ss]) => {
      const count = (p: (s: ReadinessSample) => boolean) => ss.filter(p).length;
      return (
        `${node}: ${ss.length} samples; Node Ready=True ${count((s) => s.ready === 'True')}, not True ${count((s) => s.ready !== 'True')}; ` +
        `NetworkReady true ${count((s) => s.networkReady === true)}, false ${count((s) => s.networkReady === false)}, ` +
        `CRI unreachable ${count((s) => s.networkReady === undefined)}`
      );
    })
    .join('; ');
}
