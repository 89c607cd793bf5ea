import { existsSync } from 'node:fs';
import { readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '@istio-cni/handoff';
import { atomicWrite } from './atomicWrite.ts';
import { listConfigFiles } from './cniConfigFiles.ts';
import { namesIstioCni, removeIstioEntry } from './insertCniConfig.ts';
import { PLUGIN_TYPE } from '@istio-cni/handoff';
import type { ConfigRecord } from './writeCniConfig.ts';

export interface CleanupOptions {
  netDir: string;
  chained: boolean;
  /** Effective owned mode: our file is separate and is deleted. */
  owned: boolean;
  /**
   * Config files to clean: the one we found valid or wrote last, and every other file we wrote
   * during this run, each with what we last wrote there (for an exact restore of the bytes before).
   */
  configs: readonly { path: string; record: ConfigRecord | undefined }[];
  kubeconfigPath: string;
  binTargetDirs: readonly string[];
  /**
   * Awaited after a config changed, before the kubeconfig and the binary go: the runtime reloads
   * its CNI config asynchronously (containerd on an fsnotify event), and a STATUS or ADD it runs
   * with the old list meanwhile still execs the plugin, which needs both.
   */
  runtimeReload?: () => Promise<void>;
  logger?: Logger;
}

export type ConfigCleanup = 'restored' | 'entry-removed' | 'deleted' | 'untouched' | 'absent';

export interface CleanupReport {
  configs: { path: string; result: ConfigCleanup }[];
  kubeconfigRemoved: boolean;
  binariesRemoved: string[];
  /** Config files still naming istio-cni, which keep the binary in place. */
  binaryKeptFor: string[];
}

async function readIfExists(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

async function cleanupConfig(o: CleanupOptions, configPath: string, rec: ConfigRecord | undefined): Promise<ConfigCleanup> {
  const current = await readIfExists(configPath);
  if (current === undefined) return 'absent';
  const text = current.toString('utf8');
  const unchangedSinceWrite = rec !== undefined && rec.path === configPath && rec.written === text;
  if (unchangedSinceWrite && rec.previous && !namesIstioCni(rec.previous.bytes.toString('utf8'))) {
    // Nobody touched the file since we wrote it: put back exactly what was there before.
    await atomicWrite(rec.previous.path, rec.previous.bytes, rec.previous.mode);
    if (rec.previous.path !== rec.path) await rm(rec.path, { force: true });
    o.logger?.info('restored CNI config to its pre-install bytes', { path: rec.previous.path });
    return 'restored';
  }
  if (o.chained && !o.owned) {
    if (!namesIstioCni(text)) return 'untouched';
    const mode = (await stat(configPath)).mode & 0o7777;
    await atomicWrite(configPath, removeIstioEntry(text), mode);
    o.logger?.info('removed istio-cni from CNI config file', { path: configPath });
    return 'entry-removed';
  }
  if (!namesIstioCni(text)) {
    o.logger?.warn('config file no longer belongs to istio-cni; leaving it', { path: configPath });
    return 'untouched';
  }
  await rm(configPath, { force: true });
  o.logger?.info('removed istio-cni CNI config file', { path: configPath });
  return 'deleted';
}

/** Config files in the net dir that still name istio-cni. */
export async function configsNamingIstioCni(netDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = await listConfigFiles(netDir);
  } catch {
    return [];
  }
  const found: string[] = [];
  for (const name of names) {
    const text = await readIfExists(join(netDir, name));
    if (text !== undefined && namesIstioCni(text.toString('utf8'))) found.push(name);
  }
  return found;
}

/**
 * Uninstall (docs/architecture.md "Where we differ from upstream"): the config entry goes first; the kubeconfig next;
 * the plugin binary last and only when no config in the net dir still names istio-cni, so the
 * runtime is never left with a chain entry pointing at a missing binary.
 */
export async function cleanupInstall(o: CleanupOptions): Promise<CleanupReport> {
  o.logger?.info('cleaning up CNI installation');
  const configs: CleanupReport['configs'] = [];
  for (const { path, record } of o.configs) {
    if (path === '' || configs.some((c) => c.path === path)) continue;
    configs.push({ path, result: await cleanupConfig(o, path, record) });
  }
  if (o.runtimeReload !== undefined && configs.some((c) => c.result !== 'untouched' && c.result !== 'absent')) {
    o.logger?.info('letting the runtime reload its CNI config before removing the plugin');
    await o.runtimeReload();
  }
  let kubeconfigRemoved = false;
  if (o.kubeconfigPath !== '' && existsSync(o.kubeconfigPath)) {
    await rm(o.kubeconfigPath, { force: true });
    kubeconfigRemoved = true;
  }
  const binaryKeptFor = await configsNamingIstioCni(o.netDir);
  const binariesRemoved: string[] = [];
  if (binaryKeptFor.length > 0) {
    o.logger?.warn('keeping the istio-cni binary: CNI configs still name it', { files: binaryKeptFor });
  } else {
    for (const dir of o.binTargetDirs) {
      const bin = join(dir, PLUGIN_TYPE);
      if (!existsSync(bin)) continue;
      await rm(bin, { force: true });
      binariesRemoved.push(bin);
      o.logger?.info('removed binary', { path: bin });
    }
  }
  return { configs, kubeconfigRemoved, binariesRemoved, binaryKeptFor };
}
