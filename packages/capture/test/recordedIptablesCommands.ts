import { renderIptablesRestore } from '@istio-cni/capture';
import type { IptablesRuleSet } from '@istio-cni/capture';

/**
 * The lines upstream's recording stub captures for one run of the sidecar configurator on an empty
 * netns (testdata/upstream/inputs.md §1.2): both save probes, each restore document's lines (the restore command itself
 * is not recorded), then the final saves.
 */
export function recordedIptablesCommands(rules: IptablesRuleSet, enableIPv6: boolean): string[] {
  const stdinLines = (doc: string): string[] => (doc === '' ? [] : doc.replace(/\n$/, '').split('\n'));
  return [
    'iptables-save',
    'ip6tables-save',
    ...stdinLines(renderIptablesRestore(rules.v4)),
    ...stdinLines(renderIptablesRestore(rules.v6)),
    'iptables-save',
    ...(enableIPv6 ? ['ip6tables-save'] : []),
  ];
}
