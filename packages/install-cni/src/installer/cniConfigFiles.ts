import { readFile, readdir } from 'node:fs/promises';
import { extname, join } from 'node:path';
import type { Logger } from '@istio-cni/handoff';
import { isJsonObject, parseJson, type JsonObject, type JsonValue } from '@istio-cni/cni';

/**
 * Extensions the runtime loads. Upstream looks at `.conf` and `.conflist` only; libcni and
 * containerd also load `.json` (as a single-plugin config), so a lexicographically-first `.json`
 * must not be skipped when choosing the primary.
 */
export const CONFIG_EXTENSIONS = ['.conf', '.conflist', '.json'] as const;

/** A name the runtime would load as a CNI config. */
export function isConfigFileName(name: string): boolean {
  return (CONFIG_EXTENSIONS as readonly string[]).includes(extname(name));
}

export function isListFile(name: string): boolean {
  return name.endsWith('.conflist');
}

function stringField(obj: JsonObject, key: string): string | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new Error(`${key} must be a string, got ${JSON.stringify(v)}`);
  return v;
}

/** libcni's ConfFromBytes: a JSON object whose standard keys have the right types. */
function checkNetConf(v: JsonValue): JsonObject {
  if (!isJsonObject(v)) throw new Error('not a JSON object');
  stringField(v, 'cniVersion');
  stringField(v, 'name');
  stringField(v, 'type');
  for (const key of ['ipam', 'dns', 'capabilities'] as const) {
    const x = v[key];
    if (x !== undefined && x !== null && !isJsonObject(x)) throw new Error(`${key} must be an object`);
  }
  return v;
}

/** Why a config text is not loadable by the runtime, or undefined when it is (upstream `cni/pkg/install/cniconfig.go`). */
export function configProblem(name: string, text: string): string | undefined {
  let v: JsonValue;
  try {
    v = parseJson(text);
  } catch (err) {
    return `error parsing configuration: ${(err as Error).message}`;
  }
  try {
    if (isListFile(name)) {
      if (!isJsonObject(v)) return 'error parsing configuration list: not a JSON object';
      if (!('name' in v)) return 'error parsing configuration list: no name';
      stringField(v, 'name');
      stringField(v, 'cniVersion');
      if (!('plugins' in v)) return "error parsing configuration list: no 'plugins' key";
      const plugins = v.plugins;
      if (!Array.isArray(plugins)) return "error parsing configuration list: invalid 'plugins' type";
      if (plugins.length === 0) return 'CNI config list has no networks';
      plugins.forEach((p, i) => {
        try {
          checkNetConf(p);
        } catch (err) {
          throw new Error(`failed to parse plugin config ${i}: ${(err as Error).message}`);
        }
      });
      return undefined;
    }
    const conf = checkNetConf(v);
    if (!conf.type) return "no 'type'; perhaps this is a .conflist?";
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** Config file names in `dir` with a runtime-loaded extension, sorted by byte order. */
export async function listConfigFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  return entries
    .filter((e) => !e.isDirectory() && isConfigFileName(e.name))
    .map((e) => e.name)
    .sort(byteOrder);
}

/**
 * Valid config file names in priority order (first = what the runtime uses). Invalid files are
 * skipped with a warning. A missing directory yields an empty list.
 */
export async function listValidConfigFiles(dir: string, logger?: Logger): Promise<string[]> {
  let names: string[];
  try {
    names = await listConfigFiles(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const valid: string[] = [];
  for (const name of names) {
    let text: string;
    try {
      text = await readFile(join(dir, name), 'utf8');
    } catch (err) {
      // Gone between readdir and read (another writer renaming): not a candidate.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    const problem = configProblem(name, text);
    if (problem === undefined) valid.push(name);
    else logger?.warn('skipping invalid CNI config file', { file: join(dir, name), error: problem });
  }
  return valid;
}
