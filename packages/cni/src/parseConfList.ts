import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goJsonKind } from './goJson.ts';
import { parseJsonObject } from './parseNetConf.ts';
import { validateNetworkName } from './validateNames.ts';

/** A network configuration list (`.conflist`). */
export interface ConfList {
  cniVersion: string;
  name: string;
  plugins: Record<string, unknown>[];
  raw: Record<string, unknown>;
  disableCheck?: boolean;
  disableGC?: boolean;
}

const CONTEXT = 'error parsing configuration list';

function invalid(msg: string): never {
  throw new CniError(ErrorCode.InvalidNetworkConfig, `${CONTEXT}: ${msg}`);
}

// libcni accepts a JSON bool or the strings strconv.ParseBool understands.
function optionalBool(raw: Record<string, unknown>, key: string): boolean | undefined {
  const v = raw[key];
  if (v === undefined) return undefined;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string') {
    if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return true;
    if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) return false;
    invalid(`invalid ${key} value ${JSON.stringify(v)}`);
  }
  invalid(`invalid ${key} type ${goJsonKind(v)}`);
}

/**
 * Reads a configuration list the way libcni's ConfListFromBytes does: a
 * valid `name`, a non-empty `plugins` array of objects each with a `type`.
 * Throws CniError 6 for bad JSON, 7 for a structurally invalid list.
 */
export function parseConfList(text: Buffer | string): ConfList {
  const raw = parseJsonObject(text, CONTEXT);
  const name = raw['name'];
  if (name === undefined) invalid('no name');
  if (typeof name !== 'string') invalid(`invalid name type ${goJsonKind(name)}`);
  validateNetworkName(name);
  const version = raw['cniVersion'];
  if (version !== undefined && typeof version !== 'string') invalid(`invalid cniVersion type ${goJsonKind(version)}`);
  const plugins = raw['plugins'];
  if (plugins === undefined) invalid("no 'plugins' key");
  if (!Array.isArray(plugins)) invalid(`invalid 'plugins' type ${goJsonKind(plugins)}`);
  if (plugins.length === 0) invalid('no plugins in list');
  plugins.forEach((p: unknown, i) => {
    if (typeof p !== 'object' || p === null || Array.isArray(p)) {
      invalid(`failed to parse plugin config ${i}: expected an object, got ${goJsonKind(p)}`);
    }
    const type = (p as Record<string, unknown>)['type'];
    if (typeof type !== 'string' || type === '') invalid(`failed to parse plugin config ${i}: missing 'type'`);
  });
  const list: ConfList = {
    cniVersion: typeof version === 'string' ? version : '',
    name,
    plugins: plugins as Record<string, unknown>[],
    raw,
  };
  const disableCheck = optionalBool(raw, 'disableCheck');
  if (disableCheck !== undefined) list.disableCheck = disableCheck;
  const disableGC = optionalBool(raw, 'disableGC');
  if (disableGC !== undefined) list.disableGC = disableGC;
  return list;
}
