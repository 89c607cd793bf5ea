import { createHash, type Hash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IptablesFamily } from './detectIptablesBackend.ts';
import { inNetnsSync, type NetnsLibc, netnsLibc, SOCK_CLOEXEC } from './netnsSocket.ts';

/**
 * A fingerprint of every legacy (x_tables) table of a network namespace, IPv4 and optionally IPv6,
 * read in-process with `getsockopt(IPT_SO_GET_INFO / IPT_SO_GET_ENTRIES)` (IP6T_SO_* for IPv6), the
 * calls `iptables-legacy-save` / `ip6tables-legacy-save` themselves make, with the packet and byte
 * counters zeroed. iptables-legacy has no generation counter (unlike nf_tables,
 * `nftGeneration.ts`): two equal fingerprints mean no rule, chain or policy changed, so a pod found
 * in place needs no `iptables-legacy-save` while its fingerprint stays the same. The table names
 * come from the netns's `/proc/net/ip_tables_names` (`ip6_tables_names`; asking for a table by name
 * would create it). Linux only; needs CAP_NET_RAW and CAP_NET_ADMIN in the pod's netns.
 */
export interface LegacyTablesFingerprinter {
  /** The fingerprint of the netns open at `netnsFd` (IPv4 tables unless `families` says otherwise). Throws when it cannot be read. */
  fingerprint(netnsFd: number, families?: readonly IptablesFamily[]): string;
}

const SOCK_RAW = 3;
const IPPROTO_RAW = 255;
/** IPT_SO_GET_INFO and IP6T_SO_GET_INFO; GET_ENTRIES is the next one. */
const SO_GET_INFO = 64;
const SO_GET_ENTRIES = 65;
const TABLE_NAME_LEN = 32;
/** struct ipt_getinfo / ip6t_getinfo: name[32], valid_hooks, hook_entry[5], underflow[5], num_entries, size. */
const GETINFO_SIZE = 84;
const GETINFO_SIZE_AT = 80;
/** struct ipt_get_entries / ip6t_get_entries: name[32], size, then the entries (8-byte aligned). */
const GET_ENTRIES_HEADER = 40;
const COUNTERS_SIZE = 16;

/** Where each family's tables are listed and read, and where next_offset and the xt_counters sit in an entry. */
const FAMILIES: Record<IptablesFamily, { names: string; domain: number; level: number; nextOffsetAt: number; countersAt: number }> = {
  // struct ipt_entry: after struct ipt_ip (84 bytes), nfcache, target_offset, next_offset (u16 at 90), comefrom, counters at 96.
  ipv4: { names: 'ip_tables_names', domain: 2, level: 0, nextOffsetAt: 90, countersAt: 96 },
  // struct ip6t_entry: after struct ip6t_ip6 (136 bytes), the same fields: next_offset at 142, counters at 152.
  ipv6: { names: 'ip6_tables_names', domain: 10, level: 41, nextOffsetAt: 142, countersAt: 152 },
};

/** Zeroes each entry's counters in an `ipt_get_entries` (or, `ipv6`, `ip6t_get_entries`) blob (entries start at GET_ENTRIES_HEADER). */
export function zeroEntryCounters(blob: Buffer, family: IptablesFamily = 'ipv4'): Buffer {
  const { nextOffsetAt, countersAt } = FAMILIES[family];
  for (let at = GET_ENTRIES_HEADER; at + countersAt + COUNTERS_SIZE <= blob.length; ) {
    blob.fill(0, at + countersAt, at + countersAt + COUNTERS_SIZE);
    const next = blob.readUInt16LE(at + nextOffsetAt);
    if (next === 0) throw new Error(`malformed ${family === 'ipv4' ? 'ipt' : 'ip6t'}_entry (next_offset 0)`);
    at += next;
  }
  return blob;
}

function tableRequest(name: string, size: number): Buffer {
  if (Buffer.byteLength(name) >= TABLE_NAME_LEN || !/^[a-z_]+$/.test(name))
    throw new Error(`unexpected table name ${JSON.stringify(name)}`);
  const b = Buffer.alloc(size);
  b.write(name, 0, 'latin1');
  return b;
}

function hashFamily(libc: NetnsLibc, netnsFd: number, family: IptablesFamily, hash: Hash): void {
  const f = FAMILIES[family];
  const { sock, names } = inNetnsSync(libc, netnsFd, () => {
    let listed = '';
    try {
      listed = readFileSync(`/proc/thread-self/net/${f.names}`, 'latin1');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err; // no ip(6)_tables module: no legacy table
    }
    const names = listed.split('\n').filter(Boolean).sort();
    return { names, sock: names.length === 0 ? -1 : libc.socket(f.domain, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW) };
  });
  hash.update(`${family}:${names.length}\n`);
  if (names.length === 0) return;
  if (sock < 0) throw new Error(`raw socket failed (errno ${libc.errno()})`);
  try {
    for (const name of names) {
      const info = tableRequest(name, GETINFO_SIZE);
      if (libc.getsockopt(sock, f.level, SO_GET_INFO, info, [GETINFO_SIZE]) !== 0) {
        throw new Error(`${family} SO_GET_INFO ${name} failed (errno ${libc.errno()})`);
      }
      const size = info.readUInt32LE(GETINFO_SIZE_AT);
      const entries = tableRequest(name, GET_ENTRIES_HEADER + size);
      entries.writeUInt32LE(size, TABLE_NAME_LEN);
      // A table changed between the two calls answers EAGAIN: no fingerprint, the caller reads it.
      if (libc.getsockopt(sock, f.level, SO_GET_ENTRIES, entries, [entries.length]) !== 0) {
        throw new Error(`${family} SO_GET_ENTRIES ${name} failed (errno ${libc.errno()})`);
      }
      hash.update(info.subarray(TABLE_NAME_LEN));
      hash.update(zeroEntryCounters(entries, family));
    }
  } finally {
    libc.close(sock);
  }
}

export function createLegacyTablesFingerprinter(): LegacyTablesFingerprinter {
  return {
    fingerprint(netnsFd, families = ['ipv4']) {
      const libc = netnsLibc();
      const hash = createHash('sha256');
      for (const family of families) hashFamily(libc, netnsFd, family, hash);
      return hash.digest('hex');
    },
  };
}
