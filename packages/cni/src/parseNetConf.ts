import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goFieldEntries, goJsonKind, goJsonParse, goStringField } from './goJson.ts';
import { parseResult } from './parseResult.ts';
import type { Result } from './result.ts';
import { errorMessage } from './errorMessage.ts';

/** A plugin's network configuration (stdin of ADD/DEL/CHECK/GC/STATUS). */
export interface NetConf {
  /** As given; empty when absent (the reference library then treats the config as 0.1.0). */
  cniVersion: string;
  name: string;
  type: string;
  /** `prevResult`, read with the config's `cniVersion` schema. */
  prevResult?: Result;
  /** every key of the input object, unknown keys preserved */
  raw: Record<string, unknown>;
}

export interface ParseNetConfOptions {
  /**
   * When the prevResult has no `cniVersion`, assume the config's (what the
   * reference library's `version.ParsePrevResult` does). Off by default, which
   * matches plugins that call `version.NewResult(conf.CNIVersion, prevResult)`.
   */
  prevResultVersionFromConfig?: boolean;
}

/** Parses JSON with Go's syntax-error wording; throws CniError 6 with `context` prefix. */
export function parseJsonObject(input: Buffer | string, context: string): Record<string, unknown> {
  const parsed = goJsonParse(typeof input === 'string' ? input : new Uint8Array(input.buffer, input.byteOffset, input.byteLength));
  if (!parsed.ok) throw new CniError(ErrorCode.DecodingFailure, `${context}: ${parsed.error}`);
  const v = parsed.value;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw new CniError(ErrorCode.DecodingFailure, `${context}: expected a JSON object, got ${goJsonKind(v)}`);
  }
  return v as Record<string, unknown>;
}

// Go decodes struct fields case-insensitively; plugins written against the
// reference library therefore accept "Name" for "name", and so do we.
function stringKey(raw: Record<string, unknown>, key: string, context: string): string {
  const decoded = goStringField(raw, key, 'NetConf');
  if (decoded.error !== undefined) {
    const bad = goFieldEntries(raw, key).find(([, v]) => v !== null && typeof v !== 'string');
    throw new CniError(ErrorCode.DecodingFailure, `${context}: field "${bad?.[0] ?? key}" must be a string, got ${goJsonKind(bad?.[1])}`);
  }
  return decoded.value;
}

/**
 * Reads a network configuration. Throws CniError 6 (DecodingFailure) for bad
 * JSON or wrongly typed standard keys and for a malformed prevResult, naming
 * the field; CniError 7 (InvalidNetworkConfig) when `name` is missing. A missing
 * `type` is not an error here: plugins never see it checked by the reference library.
 */
export function parseNetConf(stdin: Buffer | string, options: ParseNetConfOptions = {}): NetConf {
  const context = 'error parsing network configuration';
  const raw = parseJsonObject(stdin, context);
  const conf: NetConf = {
    cniVersion: stringKey(raw, 'cniVersion', context),
    name: stringKey(raw, 'name', context),
    type: stringKey(raw, 'type', context),
    raw,
  };
  if (conf.name === '') throw new CniError(ErrorCode.InvalidNetworkConfig, 'missing network name');
  const prev = goFieldEntries(raw, 'prevResult').at(-1)?.[1];
  if (prev !== undefined && prev !== null) {
    if (typeof prev !== 'object' || Array.isArray(prev)) {
      throw new CniError(ErrorCode.DecodingFailure, `could not parse prevResult: expected an object, got ${goJsonKind(prev)}`);
    }
    let input = prev as Record<string, unknown>;
    if (options.prevResultVersionFromConfig === true && (input['cniVersion'] === undefined || input['cniVersion'] === '')) {
      input = { ...input, cniVersion: conf.cniVersion };
    }
    try {
      conf.prevResult = parseResult(input, conf.cniVersion);
    } catch (e) {
      const msg = errorMessage(e);
      throw new CniError(ErrorCode.DecodingFailure, `could not parse prevResult: ${msg}`);
    }
  }
  return conf;
}
