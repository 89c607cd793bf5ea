import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { inNetnsSync, netnsLibc, SOCK_CLOEXEC } from './netnsSocket.ts';

/**
 * A fingerprint of every legacy (x_tables) IPv4 table of a network namespace, read in-process with
 * `getsockopt(IPT_SO_GET_INFO / IPT_SO_GET_ENTRIES)`, the calls `iptables-legacy-save` itself makes,
 * with the packet and byte counters zeroed. iptables-legacy has no generation counter (unlike
 * nf_tables, `nftGeneration.ts`): two equal fingerprints mean no rule, chain or policy changed, so a
 * pod found in place needs no `iptables-legacy-save` while its fingerprint stays the same. The
 * table names come from the netns's `/proc/net/ip_tables_names` (asking for a table by name would
 * create it). Linux only; needs CAP_NET_RAW and CAP_NET_ADMIN in the pod's netns.
 */
export interface LegacyTablesFingerprinter {
  /** The fingerprint of the netns open at `netnsFd`. Throws when it cannot be read. */
  fingerprint(netnsFd: number): string;
}

const AF_INET = 2;
const SOCK_RAW = 3;
const IPPROTO_RAW = 255;
const SOL_IP = 0;
const IPT_SO_GET_INFO = 64;
const IPT_SO_GET_ENTRIES = 65;
const TABLE_NAME_LEN = 32;
/** struct ipt_getinfo: name[32], valid_hooks, hook_entry[5], underflow[5], num_entries, size. */
const GETINFO_SIZE = 84;
const GETINFO_SIZE_AT = 80;
/** struct ipt_get_entries: name[32], size, then the entries (8-byte aligned). */
const GET_ENTRIES_HEADER = 40;
/** In struct ipt_entry: next_offset (u16) and the xt_counters (two u64) that traffic moves. */
const ENTRY_NEXT_OFFSET_AT = 90;
const ENTRY_COUNTERS_AT = 96;
const COUNTERS_SIZE = 16;

/** Zeroes each entry's counters in an `ipt_get_entries` blob (entries start at GET_ENTRIES_HEADER). */
export function zeroEntryCounters(blob: Buffer): Buffer {
  for (let at = GET_ENTRIES_HEADER; at + ENTRY_COUNTERS_AT + COUNTERS_SIZE <= blob.length; ) {
    blob.fill(0, at + ENTRY_COUNTERS_AT, at + ENTRY_COUNTERS_AT + COUNTERS_SIZE);
    const next = blob.readUInt16LE(at + ENTRY_NEXT_OFFSET_AT);
    if (next === 0) throw new Error('malformed ipt_entry (next_offset 0)');
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

export function createLegacyTablesFingerprinter(): LegacyTablesFingerprinter {
  return {
    fingerprint(netnsFd) {
      const libc = netnsLibc();
      const { sock, names } = inNetnsSync(libc, netnsFd, () => {
        let listed = '';
        try {
          listed = readFileSync('/proc/thread-self/net/ip_tables_names', 'latin1');
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err; // no ip_tables module: no legacy table
        }
        const names = listed.split('\n').filter(Boolean).sort();
        return { names, sock: names.length === 0 ? -1 : libc.socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW) };
      });
      const hash = createHash('sha256');
      if (names.length === 0) return hash.digest('hex');
      if (sock < 0) throw new Error(`raw socket failed (errno ${libc.errno()})`);
      try {
        for (const name of names) {
          const info = tableRequest(name, GETINFO_SIZE);
          if (libc.getsockopt(sock, SOL_IP, IPT_SO_GET_INFO, info, [GETINFO_SIZE]) !== 0) {
            throw new Error(`IPT_SO_GET_INFO ${name} failed (errno ${libc.errno()})`);
          }
          const size = info.readUInt32LE(GETINFO_SIZE_AT);
          const entries = tableRequest(name, GET_ENTRIES_HEADER + size);
          entries.writeUInt32LE(size, TABLE_NAME_LEN);
          // A table changed between the two calls answers EAGAIN: no fingerprint, the caller reads it.
          if (libc.getsockopt(sock, SOL_IP, IPT_SO_GET_ENTRIES, entries, [entries.length]) !== 0) {
            throw new Error(`IPT_SO_GET_ENTRIES ${name} failed (errno ${libc.errno()})`);
          }
          hash.update(info.subarray(TABLE_NAME_LEN));
          hash.update(zeroEntryCounters(entries));
        }
      } finally {
        libc.close(sock);
      }
      return hash.digest('hex');
    },
  };
}
