import { normalizeRuleDump } from './hostLeaks.ts';
import { runCommand } from './runCommand.ts';

/** `family name` of every nft table in the caller's netns (iptables-nft's tables included). */
export async function nftTables(): Promise<Set<string>> {
  const { stdout } = await runCommand(['nft', 'list', 'tables'], { allowFailure: true });
  return new Set(
    stdout
      .split('\n')
      .filter((line) => line.startsWith('table '))
      .map((line) => line.slice('table '.length).trim()),
  );
}

/**
 * Deletes the nft tables not in `keep` that hold nothing but accept-policy base chains: iptables-nft
 * creates a table with its built-in chains on first use (the bridge plugin's masquerade, the agent's
 * host rules) and never removes it, even once its last rule is gone.
 */
export async function removeEmptyNftTables(keep: ReadonlySet<string>): Promise<void> {
  for (const table of await nftTables()) {
    if (keep.has(table)) continue;
    const [family, name] = table.split(' ') as [string, string];
    const { stdout, exitCode } = await runCommand(['nft', 'list', 'table', family, name], { allowFailure: true });
    if (exitCode === 0 && normalizeRuleDump('nft', stdout).length === 0) {
      await runCommand(['nft', 'delete', 'table', family, name], { allowFailure: true });
    }
  }
}
