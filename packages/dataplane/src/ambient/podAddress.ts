import { type IpAddress, parseIpAddress } from '@istio-cni/cni';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';

export interface PodAddress {
  family: 4 | 6;
  /** Canonical text; IPv4-mapped IPv6 is given as plain IPv4, as upstream unmaps pod IPs. */
  address: string;
}

/** Parses a pod or interface IP strictly; a bad value is an error naming it. */
export function parsePodAddress(ip: string): PodAddress {
  let parsed: IpAddress;
  try {
    parsed = parseIpAddress(ip);
  } catch (err) {
    throw new AmbientDataplaneError('ERR_AMBIENT_INVALID_ARGUMENT', `invalid pod IP ${JSON.stringify(ip)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const b = parsed.bytes;
  if (parsed.family === 6 && b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) {
    return { family: 4, address: b.slice(12).join('.') };
  }
  return { family: parsed.family, address: parsed.address };
}

/**
 * Pod UIDs end up as ipset/nft comments and in argv. Kubernetes UIDs are UUIDs; this keeps
 * anything else that could confuse the tools out.
 */
export function checkPodUid(uid: string): string {
  if (typeof uid !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(uid)) {
    throw new AmbientDataplaneError('ERR_AMBIENT_INVALID_ARGUMENT', `invalid pod UID ${JSON.stringify(String(uid)).slice(0, 80)}`);
  }
  return uid;
}
