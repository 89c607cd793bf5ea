import { errorMessage, goConfigFileText, isJsonObject, parseJson, type JsonObject, type JsonValue } from '@istio-cni/cni';
import { PLUGIN_TYPE } from '@istio-cni/handoff';

/** A config that cannot take (or give up) the istio-cni entry; the message names the file. */
export class CniConfigError extends Error {
  override name = 'CniConfigError';
}

function parseObject(what: string, text: string): JsonObject {
  let v: JsonValue;
  try {
    v = parseJson(text);
  } catch (err) {
    throw new CniConfigError(`error loading ${what} (JSON error): ${errorMessage(err)}`);
  }
  if (!isJsonObject(v)) throw new CniConfigError(`error loading ${what}: not a JSON object`);
  return v;
}

/** The `plugins` list of a conflist, each entry checked to be an object. */
export function getPlugins(conf: JsonObject): JsonObject[] {
  const plugins = conf.plugins;
  if (!Array.isArray(plugins)) throw new CniConfigError('error reading plugin list: no "plugins" array');
  return plugins.map((p, i) => {
    if (!isJsonObject(p)) throw new CniConfigError(`error reading plugin ${i}: not a JSON object`);
    return p;
  });
}

function withoutFirstIstio(plugins: JsonObject[]): JsonObject[] {
  const i = plugins.findIndex((p) => p.type === PLUGIN_TYPE);
  return i < 0 ? plugins : [...plugins.slice(0, i), ...plugins.slice(i + 1)];
}

/**
 * Merges the istio-cni entry into an existing config (upstream `insertCNIConfig`): a single
 * plugin is wrapped into a `k8s-pod-network` list, a list has its first istio-cni entry replaced
 * by the new one appended last. Output keys are sorted at every depth.
 */
export function insertCniConfig(newConfig: string | JsonObject, existingText: string): string {
  const istio = typeof newConfig === 'string' ? parseObject('Istio CNI config', newConfig) : { ...newConfig };
  const existing = parseObject('existing CNI config', existingText);
  delete istio.cniVersion;
  if ('type' in existing) {
    delete existing.cniVersion;
    return goConfigFileText({ cniVersion: '0.3.1', name: 'k8s-pod-network', plugins: [existing, istio] }, 'sorted');
  }
  let plugins: JsonObject[];
  try {
    plugins = getPlugins(existing);
  } catch (err) {
    throw new CniConfigError(`existing CNI config: ${(err as Error).message}`);
  }
  return goConfigFileText({ ...existing, plugins: [...withoutFirstIstio(plugins), istio] }, 'sorted');
}

/** The config with its first istio-cni plugin removed, re-serialised (cleanup, testdata/upstream/inputs.md §5.1). */
export function removeIstioEntry(existingText: string): string {
  const existing = parseObject('CNI config', existingText);
  return goConfigFileText({ ...existing, plugins: withoutFirstIstio(getPlugins(existing)) }, 'sorted');
}

function parsedObject(text: string): JsonObject | undefined {
  try {
    const v = parseJson(text);
    return isJsonObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

const listNamesIstio = (v: JsonObject): boolean =>
  Array.isArray(v.plugins) && v.plugins.some((p) => isJsonObject(p) && p.type === PLUGIN_TYPE);

/** True when the JSON text is a conflist with an istio-cni entry. */
export function hasIstioListEntry(text: string): boolean {
  const v = parsedObject(text);
  return v !== undefined && listNamesIstio(v);
}

/** True when the JSON text is a config that names istio-cni (top level or any list entry). */
export function namesIstioCni(text: string): boolean {
  const v = parsedObject(text);
  return v !== undefined && (v.type === PLUGIN_TYPE || listNamesIstio(v));
}
