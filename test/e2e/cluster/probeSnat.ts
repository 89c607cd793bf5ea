// The node's ambient probe SNAT rule (iptables backends): kubelet's probes of an ambient pod pass
// only through it, in-pod rules sending them to ztunnel's inbound port otherwise.
import { runCommand } from '../support/runCommand.ts';
import type { RunningNode } from './node.ts';

const SNAT_V4 = '169.254.7.127';
const SNAT_V6 = 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff';

/** Packets through the node's probe SNAT rule of a family, over both iptables backends (`-save -c` counters). */
export async function snatPackets(node: RunningNode, family: 4 | 6): Promise<number> {
  return (await snatLines(node, family)).reduce((n, l) => n + Number(/^\[(\d+):/.exec(l)?.[1] ?? 0), 0);
}

export async function snatRules(node: RunningNode, family: 4 | 6): Promise<number> {
  return (await snatLines(node, family)).length;
}

async function snatLines(node: RunningNode, family: 4 | 6): Promise<string[]> {
  const to = family === 6 ? SNAT_V6 : SNAT_V4;
  const tools = family === 6 ? ['ip6tables-legacy-save', 'ip6tables-nft-save'] : ['iptables-legacy-save', 'iptables-nft-save'];
  const lines: string[] = [];
  for (const tool of tools) {
    const { stdout } = await runCommand(['ip', 'netns', 'exec', node.layout.netns, tool, '-c', '-t', 'nat'], { allowFailure: true });
    lines.push(...stdout.split('\n').filter((l) => l.includes('-j SNAT') && l.includes(`--to-source ${to}`)));
  }
  return lines;
}
