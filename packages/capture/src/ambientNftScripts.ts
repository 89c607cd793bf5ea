import { ambientProbeSetName } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';
import { parseIpAddress, quoteForError } from '@istio-cni/cni';
import type { NftLayout, NftRule, NftTable } from './nftRule.ts';
import { renderNftTransaction } from './renderNftTransaction.ts';

const NAT: NftTable = 'istio-ambient-nat';
const AMBIENT_POD_TABLES: readonly NftTable[] = ['istio-ambient-nat', 'istio-ambient-mangle', 'istio-ambient-raw'];
const PROBE_SET_COMMENT = 'UUID of the pods that are part of ambient mesh';

/** In-pod tables and candidate chains (upstream `cni/pkg/nftables`); jump targets are declared even when empty. */
export const AMBIENT_POD_NFT_LAYOUT: NftLayout = {
  declareJumpTargets: true,
  tables: [
    {
      name: 'istio-ambient-nat',
      chains: [
        { name: 'prerouting', base: { type: 'nat', hook: 'prerouting', priority: -100 } },
        { name: 'output', base: { type: 'nat', hook: 'output', priority: -100 } },
        { name: 'istio-prerouting' },
        { name: 'istio-output' },
      ],
    },
    {
      name: 'istio-ambient-mangle',
      chains: [
        { name: 'prerouting', base: { type: 'filter', hook: 'prerouting', priority: -150 } },
        { name: 'output', base: { type: 'route', hook: 'output', priority: -150 } },
        { name: 'istio-prerouting' },
        { name: 'istio-output' },
      ],
    },
    {
      name: 'istio-ambient-raw',
      chains: [
        { name: 'prerouting', base: { type: 'filter', hook: 'prerouting', priority: -300 } },
        { name: 'output', base: { type: 'filter', hook: 'output', priority: -300 } },
        { name: 'istio-prerouting' },
        { name: 'istio-output' },
      ],
    },
  ],
};

/** The host table holds the probe SNAT chain (and, separately created, the probe sets). */
export const AMBIENT_HOST_NFT_LAYOUT: NftLayout = {
  declareJumpTargets: true,
  tables: [{ name: NAT, chains: [{ name: 'postrouting', base: { type: 'nat', hook: 'postrouting', priority: 100 } }] }],
};

/**
 * `nft -f` input applying in-pod rules: each table is added, flushed and re-filled in one
 * transaction, so re-applying converges without a separate reconcile step.
 */
export function renderAmbientPodNftTransaction(rules: readonly NftRule[]): string {
  return renderNftTransaction(rules, AMBIENT_POD_NFT_LAYOUT);
}

/** `nft -f` input applying the host probe rule (the probe sets are not touched by the flush). */
export function renderAmbientHostNftTransaction(rules: readonly NftRule[]): string {
  return renderNftTransaction(rules, AMBIENT_HOST_NFT_LAYOUT);
}

/**
 * Removes the in-pod tables. Each delete is preceded by an add because a transaction fails as a
 * whole when it deletes a missing table; add-then-delete succeeds either way.
 */
export function ambientPodNftDeleteScript(): string {
  return AMBIENT_POD_TABLES.map((t) => `add table inet ${t}\ndelete table inet ${t}\n`).join('');
}

/** Removes the host probe rule but keeps the table's probe sets and their elements. */
export function ambientHostNftRulesDeleteScript(): string {
  return `add table inet ${NAT}\nflush table inet ${NAT}\n`;
}

/** Creates the host table and the probe set(s) if missing (the nft analogue of the ipsets). */
export function ambientProbeSetsCreateScript(config: AmbientConfig): string {
  const set = (family: 4 | 6): string =>
    `add set inet ${NAT} ${ambientProbeSetName(family)} { type ipv${family}_addr ; comment ${JSON.stringify(PROBE_SET_COMMENT)} ; }\n`;
  return `add table inet ${NAT}\n${set(4)}${config.enableIPv6 ? set(6) : ''}`;
}

/** Empties the probe set(s); done at agent start, before enrolled pods are re-added. */
export function ambientProbeSetsFlushScript(config: AmbientConfig): string {
  const flush = (family: 4 | 6): string => `flush set inet ${NAT} ${ambientProbeSetName(family)}\n`;
  return flush(4) + (config.enableIPv6 ? flush(6) : '');
}

/** Destroys the probe sets together with the host table (add first, so a missing table is fine). */
export function ambientProbeSetsDestroyScript(): string {
  return `add table inet ${NAT}\ndelete table inet ${NAT}\n`;
}

/**
 * A pod UID as an nft element comment. Kubernetes UIDs are UUIDs; the check keeps the quoted
 * comment free of quotes, backslashes and newlines whatever the API server sends.
 */
function parsePodUid(uid: string): string {
  if (typeof uid !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(uid)) {
    throw new Error(`invalid pod UID ${quoteForError(String(uid))}`);
  }
  return uid;
}

/** Parsed pod IP with IPv4-mapped IPv6 unmapped, as upstream stores it. */
function probeAddress(ip: string): { family: 4 | 6; text: string } {
  const parsed = parseIpAddress(ip);
  const b = parsed.bytes;
  const mapped = parsed.family === 6 && b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff;
  if (mapped) return { family: 4, text: b.slice(12).join('.') };
  return { family: parsed.family, text: parsed.address };
}

/**
 * Adds a pod IP to its family's probe set with the pod UID as comment, or deletes it. Returns
 * `undefined` for an IPv6 address while IPv6 is disabled (upstream skips it). Throws on a bad IP
 * or UID.
 */
export function ambientProbeSetElementScript(
  config: AmbientConfig,
  action: 'add' | 'delete',
  ip: string,
  podUid?: string,
): string | undefined {
  const addr = probeAddress(ip);
  if (addr.family === 6 && !config.enableIPv6) return undefined;
  const set = ambientProbeSetName(addr.family);
  if (action === 'delete') return `delete element inet ${NAT} ${set} { ${addr.text} }\n`;
  if (podUid === undefined) throw new Error('adding a probe set element needs the pod UID');
  return `add element inet ${NAT} ${set} { ${addr.text} comment ${JSON.stringify(parsePodUid(podUid))} }\n`;
}
