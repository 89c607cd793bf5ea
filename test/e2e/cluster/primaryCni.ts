// The primary CNI's stand-in on a cluster node: the conflist node.ts writes at the node's start,
// read and rewritten the way a primary CNI's agent (Cilium, Calico) rewrites its own file, and the
// conflist the runtime loads (libcni: the lexically first config file of the directory).
import { readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import type { RunningNode } from './node.ts';

export const PRIMARY_CONFLIST = '10-bridge.conflist';
/** The chart's default istioOwnedCNIConfigFileName. */
export const OWNED_CONFLIST = '02-istio-cni.conflist';
const CONFIG_FILE = /\.(conflist|conf|json)$/;

interface Conflist {
  plugins: Record<string, unknown>[];
}

export const netDir = (node: RunningNode): string => join(node.layout.dir, 'cni/net.d');
export const primaryConflistPath = (node: RunningNode): string => join(netDir(node), PRIMARY_CONFLIST);

export function readConflist(path: string): Conflist | undefined {
  try {
    const doc = JSON.parse(readFileSync(path, 'utf8')) as Partial<Conflist>;
    return Array.isArray(doc.plugins) ? (doc as Conflist) : undefined;
  } catch {
    return undefined;
  }
}

/** The plugin types of a conflist in chain order; none when it is missing or not a conflist. */
export const conflistTypes = (path: string): string[] => (readConflist(path)?.plugins ?? []).map((p) => String(p.type));

/**
 * Rewrites the primary's conflist as Cilium does: the whole file, its own plugins only (an
 * istio-cni entry dropped), renamed into place. `generation` stands for a changed setting: a key
 * on the first plugin, which the bridge plugin ignores.
 */
export function rewritePrimaryConflist(node: RunningNode, generation?: number): void {
  const path = primaryConflistPath(node);
  const doc = readConflist(path);
  if (doc === undefined) throw new Error(`${path} is not a conflist`);
  doc.plugins = doc.plugins
    .filter((p) => p.type !== 'istio-cni')
    .map((p, i) => (i === 0 && generation !== undefined ? { ...p, standInGeneration: generation } : p));
  const tmp = `${path}.primary-tmp`;
  writeFileSync(tmp, `${JSON.stringify(doc, null, 2)}\n`);
  renameSync(tmp, path);
}

/** The file the runtime chains pods through: the lexically first config file of the node's net.d. */
export function runtimeConflist(node: RunningNode): string | undefined {
  const first = readdirSync(netDir(node))
    .filter((n) => CONFIG_FILE.test(n))
    .sort()[0];
  return first === undefined ? undefined : join(netDir(node), first);
}

/** True when `ownedPath` holds the primary's plugins as they are now, then istio-cni last. */
export function mirrorsPrimary(ownedPath: string, node: RunningNode): boolean {
  const owned = readConflist(ownedPath)?.plugins;
  const primary = readConflist(primaryConflistPath(node))?.plugins;
  if (owned === undefined || primary === undefined || owned.at(-1)?.type !== 'istio-cni') return false;
  return isDeepStrictEqual(
    owned.slice(0, -1),
    primary.filter((p) => p.type !== 'istio-cni'),
  );
}
