// The two tiny decoders the reference skel runs over stdin before any plugin
// code: `validateConfig` (network name) and `version.ConfigDecoder`. Their
// error texts come from Go's encoding/json, reproduced here.

import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goJsonKind, goJsonParse, goStringField } from './goJson.ts';
import { validateNetworkName } from './validateNames.ts';

function decodeStringField(stdin: Uint8Array, field: string, goType: string): string {
  const parsed = goJsonParse(stdin);
  if (!parsed.ok) throw new Error(parsed.error);
  const v = parsed.value;
  if (v === null) return '';
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw new Error(`json: cannot unmarshal ${goJsonKind(v)} into Go value of type ${goType}`);
  }
  const decoded = goStringField(v as Record<string, unknown>, field, '');
  if (decoded.error !== undefined) throw new Error(decoded.error);
  return decoded.value;
}

/** skel's validateConfig: stdin must decode and carry a valid, non-empty `name`. */
export function validateSkelConfig(stdin: Uint8Array): void {
  let name: string;
  try {
    name = decodeStringField(stdin, 'name', 'struct { Name string "json:\\"name\\"" }');
  } catch (e) {
    throw new CniError(ErrorCode.DecodingFailure, `error unmarshall network config: ${(e as Error).message}`);
  }
  if (name === '') throw new CniError(ErrorCode.InvalidNetworkConfig, 'missing network name');
  validateNetworkName(name);
}

/** `version.ConfigDecoder.Decode`: the config's cniVersion, '0.1.0' when empty. Throws plain Error. */
export function decodeConfigVersion(stdin: Uint8Array): string {
  let version: string;
  try {
    version = decodeStringField(stdin, 'cniVersion', 'struct { CNIVersion string "json:\\"cniVersion\\"" }');
  } catch (e) {
    throw new Error(`decoding version from network config: ${(e as Error).message}`);
  }
  return version === '' ? '0.1.0' : version;
}
