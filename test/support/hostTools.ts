import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';

/**
 * The skip reasons of tests that need the host: root, and the tools of scripts/host-tools.txt (the one
 * list, which scripts/setup.sh installs from). A missing tool skips the test with one line naming it
 * and its Debian package, instead of failing on a spawn error deep inside the test.
 */

const HOST_TOOLS_LIST = resolve(import.meta.dirname, '../../scripts/host-tools.txt');

export type HostToolGroup = 'kernel' | 'cni-plugins' | 'build' | 'image' | 'cluster';

interface HostTool {
  tool: string;
  debianPackage: string;
  group: string;
}

function readHostTools(): HostTool[] {
  const tools: HostTool[] = [];
  for (const line of readFileSync(HOST_TOOLS_LIST, 'utf8').split('\n')) {
    const [debianPackage, group, ...names] = line.trim().split(/\s+/);
    if (debianPackage === undefined || debianPackage === '' || debianPackage.startsWith('#') || group === undefined) continue;
    for (const tool of names) tools.push({ tool, debianPackage, group });
  }
  return tools;
}

function isExecutableFile(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** What the tests will exec: an absolute path as is, a name through this process's PATH. */
function present(tool: string): boolean {
  if (tool.startsWith('/')) return isExecutableFile(tool);
  return (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => dir !== '')
    .some((dir) => isExecutableFile(join(dir, tool)));
}

/** `needs nft (Debian package nftables; sudo make setup installs it)` for the first missing tool of the groups. */
export function missingHostTool(...groups: HostToolGroup[]): string | false {
  const missing = readHostTools().find((t) => groups.includes(t.group as HostToolGroup) && !present(t.tool));
  return missing === undefined ? false : `needs ${missing.tool} (Debian package ${missing.debianPackage}; sudo make setup installs it)`;
}

const isRoot = process.getuid?.() === 0;

/** Root plus the kernel tools: network namespaces, iptables (nft and legacy), nft, ipset, conntrack. */
export const kernelSkip: string | false = isRoot ? missingHostTool('kernel') : 'needs root (network namespaces, iptables, nft)';

/** `kernelSkip`, plus Debian's reference CNI plugins in /usr/lib/cni. */
export const referencePluginsSkip: string | false = kernelSkip || missingHostTool('cni-plugins');
