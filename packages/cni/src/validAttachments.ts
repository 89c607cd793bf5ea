import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goJsonKind } from './goJson.ts';
import type { NetConf } from './parseNetConf.ts';

/** The netconf key through which the runtime tells a GC which attachments to keep (spec 1.1). */
export const VALID_ATTACHMENTS_KEY = 'cni.dev/valid-attachments';

export interface Attachment {
  containerId: string;
  ifName: string;
}

/**
 * The attachments a GC must keep, from `cni.dev/valid-attachments`
 * (`[{"containerID": "...", "ifname": "..."}]`). Absent or null means none.
 * Throws CniError 6 naming the element when the list is malformed.
 */
export function validAttachments(conf: NetConf): Attachment[] {
  const list = conf.raw[VALID_ATTACHMENTS_KEY];
  if (list === undefined || list === null) return [];
  const fail = (where: string, what: string): never => {
    throw new CniError(ErrorCode.DecodingFailure, `${VALID_ATTACHMENTS_KEY}${where}: ${what}`);
  };
  if (!Array.isArray(list)) fail('', `expected an array, got ${goJsonKind(list)}`);
  return (list as unknown[]).map((item, i) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) {
      return fail(`[${i}]`, `expected an object, got ${goJsonKind(item)}`);
    }
    const o = item as Record<string, unknown>;
    const containerId = o['containerID'] ?? '';
    const ifName = o['ifname'] ?? '';
    if (typeof containerId !== 'string') fail(`[${i}].containerID`, `expected a string, got ${goJsonKind(containerId)}`);
    if (typeof ifName !== 'string') fail(`[${i}].ifname`, `expected a string, got ${goJsonKind(ifName)}`);
    return { containerId: containerId as string, ifName: ifName as string };
  });
}
