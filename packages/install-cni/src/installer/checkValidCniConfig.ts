import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { PLUGIN_TYPE, buildPluginConfig, type Logger } from '@istio-cni/handoff';
import { listValidConfigFiles } from './cniConfigFiles.ts';
import type { CniConfigSettings } from './cniConfigSettings.ts';
import { errorMessage, isJsonObject, parseJson, type JsonObject } from '@istio-cni/cni';
import { getPlugins, hasIstioListEntry, insertCniConfig } from './insertCniConfig.ts';

export interface CheckState {
  /** Path of the config file we last wrote or found valid; empty before the first pass. */
  configPath: string;
  /** Primary config name remembered in owned mode when the user named none. */
  primaryName: string;
}

async function readObject(path: string): Promise<{ text: string; object: JsonObject }> {
  const text = await readFile(path, 'utf8');
  const object = parseJson(text);
  if (!isJsonObject(object)) throw new Error(`${path}: not a JSON object`);
  return { text, object };
}

function withoutVersion(o: JsonObject): JsonObject {
  const copy = { ...o };
  delete copy.cniVersion;
  return copy;
}

function pluginTypes(path: string, conf: JsonObject): string[] {
  return getPlugins(conf).map((p, i) => {
    if (typeof p.type !== 'string') throw new Error(`${path}: plugin ${i} type ${JSON.stringify(p.type)} is not a string`);
    return p.type;
  });
}

/**
 * Why the installed config is not (or no longer) what we want, or undefined when it is valid and
 * must not be rewritten (upstream `checkValidCNIConfig`). May update `state.primaryName` (owned mode). Beyond upstream,
 * an istio-cni entry that differs from what the current settings produce is also invalid, so a
 * settings change or an upgrade rewrites a stale entry.
 */
export async function checkValidCniConfig(c: CniConfigSettings, state: CheckState, logger?: Logger): Promise<string | undefined> {
  try {
    return await check(c, state, logger);
  } catch (err) {
    return errorMessage(err);
  }
}

async function check(c: CniConfigSettings, state: CheckState, logger?: Logger): Promise<string | undefined> {
  const dir = c.mountedCniNetDir;
  const valid = await listValidConfigFiles(dir);
  const first = valid[0];
  if (first === undefined) return `no valid networks found in ${dir}`;
  if (c.owned) {
    if (first !== c.ownedFilename) {
      if (valid.includes(c.ownedFilename))
        logger?.warn('Istio-owned CNI config is not the highest priority', { first, owned: c.ownedFilename });
      return `Istio-owned CNI config ${c.ownedFilename} is not the highest priority; got ${first}`;
    }
    if (c.cniConfName === '' && state.primaryName === '') state.primaryName = valid[1] ?? '';
  }
  if (state.configPath === '') return 'istio-cni config not installed yet';
  const firstPath = join(dir, first);
  if (firstPath !== state.configPath) {
    if (c.cniConfName !== '' || !c.chainedCniPlugin) {
      logger?.warn('CNI config file preempted', { path: state.configPath, by: firstPath });
    } else {
      return `CNI config file ${JSON.stringify(state.configPath)} preempted by ${JSON.stringify(firstPath)}`;
    }
  }
  if (state.configPath === '' || !existsSync(state.configPath)) return `CNI config file removed: ${state.configPath}`;
  const desired = buildPluginConfig(c.plugin);
  const { object: conf } = await readObject(state.configPath);
  if (!c.chainedCniPlugin) {
    if (conf.type !== PLUGIN_TYPE) return `istio-cni CNI config file modified: ${state.configPath}`;
    if (!isDeepStrictEqual(withoutVersion(conf), withoutVersion(desired))) return `istio-cni config out of date: ${state.configPath}`;
    return undefined;
  }
  const types = pluginTypes(state.configPath, conf);
  const entry = getPlugins(conf).find((p) => p.type === PLUGIN_TYPE);
  if (!entry) return `istio-cni CNI config removed from CNI config file: ${state.configPath}`;
  if (!isDeepStrictEqual(withoutVersion(entry), withoutVersion(desired))) return `istio-cni entry out of date in ${state.configPath}`;
  if (c.owned) {
    // Without a known primary (only our file is present) there is nothing to compare against.
    const primaryName = c.cniConfName || state.primaryName;
    if (primaryName === '') return undefined;
    let primaryPath = join(dir, primaryName);
    if (!existsSync(primaryPath)) {
      const twin = primaryPath.endsWith('.conf') ? primaryPath + 'list' : primaryPath.endsWith('.conflist') ? primaryPath.slice(0, -4) : '';
      if (twin !== '' && existsSync(twin)) primaryPath = twin;
    }
    const { text: primaryText, object: primary } = await readObject(primaryPath);
    const primaryTypes = 'type' in primary ? [String(primary.type)] : pluginTypes(primaryPath, primary);
    const missing = primaryTypes.filter((t) => !types.includes(t));
    if (missing.length > 0) return `plugins ${missing.join(', ')} of ${primaryPath} missing in ${state.configPath}`;
    // Upstream compares plugin types only, so a primary that rewrites its file with a changed
    // setting (an MTU, an IPAM range) would leave the chain the runtime uses on the old one for good.
    if (!isDeepStrictEqual(conf, parseJson(insertCniConfig(desired, primaryText))))
      return `${state.configPath} no longer mirrors ${primaryPath}`;
    if (hasIstioListEntry(primaryText)) return `${primaryPath} still holds an istio-cni entry of chained mode`;
  }
  return undefined;
}
