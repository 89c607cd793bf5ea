import { readFile, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { buildPluginConfig, pluginConfigText, type Logger } from '@istio-cni/handoff';
import { atomicWrite, removeStaleTemps } from './atomicWrite.ts';
import { createdFileMode, type CniConfigSettings } from './cniConfigSettings.ts';
import { hasIstioListEntry, insertCniConfig, removeIstioEntry } from './insertCniConfig.ts';
import { resolveCniConfigPath } from './resolveCniConfigPath.ts';
import { recordWrite, type WriteStats } from './writeStats.ts';

export interface FileSnapshot {
  path: string;
  bytes: Buffer;
  mode: number;
}

/**
 * The config file we wrote, and what stood in its place before (for an exact restore on
 * cleanup). `primary` is the primary CNI config in chained mode (the merge source).
 */
export interface ConfigRecord {
  kind: 'chained' | 'owned' | 'standalone';
  path: string;
  written: string;
  previous: FileSnapshot | undefined;
  primary: string | undefined;
}

export class ConfigWriteError extends Error {
  override name = 'ConfigWriteError';
}

async function snapshot(path: string): Promise<FileSnapshot | undefined> {
  try {
    const [bytes, st] = await Promise.all([readFile(path), stat(path)]);
    return { path, bytes, mode: st.mode & 0o7777 };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * A single-plugin file becomes a list, which the runtime only loads from `.conflist`:
 * `x.conf` → `x.conflist` (upstream), and `x.json` → `x.conflist` (libcni/containerd load `.json`
 * as a single plugin too).
 */
export function listFileName(path: string): string {
  if (path.endsWith('.conf')) return path + 'list';
  if (path.endsWith('.json')) return path.slice(0, -'.json'.length) + '.conflist';
  return path;
}

async function writeIfChanged(path: string, text: string, mode: number, stats: WriteStats | undefined): Promise<boolean> {
  const stale = await removeStaleTemps(path);
  const current = await snapshot(path);
  if (current && current.bytes.toString('utf8') === text && current.mode === mode) return stale.length > 0;
  await atomicWrite(path, text, mode);
  recordWrite(stats, path, text);
  return true;
}

export interface WriteCniConfigOptions {
  /** Primary name to use (user's CNI_CONF_NAME, or the remembered primary in owned mode). */
  primaryName: string;
  signal?: AbortSignal;
  logger?: Logger;
  stats?: WriteStats;
}

/**
 * Owned mode: an istio-cni entry in the primary's list is a leftover of chained mode (an agent that
 * chained into the primary and was replaced by an owned-mode one keeps its entry through the
 * upgrade). Left there, it outlives an uninstall, which deletes only the owned file, and every pod
 * ADD on the node then fails. Removed once the owned file is in place (it sorts first, so the runtime
 * never loads a chain without istio-cni), and only from the bytes just read: a rewrite by the
 * primary's owner in between is left alone, and the next pass looks again.
 */
async function removeLeftoverEntry(primaryPath: string, primary: FileSnapshot, o: WriteCniConfigOptions): Promise<void> {
  const text = primary.bytes.toString('utf8');
  if (!hasIstioListEntry(text)) return;
  const now = await snapshot(primaryPath);
  if (now === undefined || !now.bytes.equals(primary.bytes)) return;
  const cleaned = removeIstioEntry(text);
  await atomicWrite(primaryPath, cleaned, primary.mode);
  recordWrite(o.stats, primaryPath, cleaned);
  o.logger?.info('removed a leftover istio-cni entry from the primary CNI config', { path: primaryPath });
}

/** Writes the istio-cni config (upstream `cniconfig.go`): chained insert, owned file, or standalone file. */
export async function writeCniConfig(c: CniConfigSettings, o: WriteCniConfigOptions): Promise<ConfigRecord> {
  const resolveOpts = {
    name: o.primaryName,
    ...(c.owned ? { exclude: new Set([c.ownedFilename]) } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
    ...(o.logger ? { logger: o.logger } : {}),
  };
  const primaryPath = await resolveCniConfigPath(c, resolveOpts);
  if (!c.chainedCniPlugin) {
    const text = pluginConfigText(c.plugin);
    const previous = await snapshot(primaryPath);
    await writeIfChanged(primaryPath, text, createdFileMode(c), o.stats);
    o.logger?.info('wrote standalone CNI config', { path: primaryPath });
    return { kind: 'standalone', path: primaryPath, written: text, previous, primary: undefined };
  }
  const primary = await snapshot(primaryPath);
  if (!primary) throw new ConfigWriteError(`CNI config file ${primaryPath} removed during configuration`);
  const merged = insertCniConfig(buildPluginConfig(c.plugin), primary.bytes.toString('utf8'));
  if (c.owned) {
    const ownedPath = join(c.mountedCniNetDir, c.ownedFilename);
    const previous = await snapshot(ownedPath);
    await writeIfChanged(ownedPath, merged, createdFileMode(c), o.stats);
    o.logger?.info('wrote Istio-owned CNI config', { path: ownedPath, primary: primaryPath });
    await removeLeftoverEntry(primaryPath, primary, o);
    return { kind: 'owned', path: ownedPath, written: merged, previous, primary: basename(primaryPath) };
  }
  const target = listFileName(primaryPath);
  await writeIfChanged(target, merged, primary.mode, o.stats);
  if (target !== primaryPath) {
    // Written under the list name first, then the single-plugin file removed: a crash in between
    // leaves the old file (sorting first, so still what the runtime uses) and the next pass redoes it.
    await rm(primaryPath, { force: true });
    o.logger?.info('converted CNI config to a list', { from: primaryPath, to: target });
  }
  o.logger?.info('inserted istio-cni into CNI config', { path: target });
  return { kind: 'chained', path: target, written: merged, previous: primary, primary: basename(target) };
}
