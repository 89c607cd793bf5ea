import { inNetnsSync, netnsLibc, SOCK_CLOEXEC } from './netnsSocket.ts';

/**
 * The nf_tables generation of a network namespace (`NFT_MSG_GETGEN`): a counter the kernel bumps
 * on every committed nftables transaction in that netns, including those iptables-nft makes. Two
 * equal readings mean no table, chain, rule or set changed in between, so a pod whose rules were
 * verified at generation g needs no `iptables-save` / `nft list` while it stays at g. Read over a
 * NETFILTER netlink socket created inside the pod netns: this thread enters it with setns(2) just
 * for the socket() call and returns at once (no JavaScript runs in between). Linux only.
 */
export interface NftGenerationReader {
  /** The generation of the netns open at `netnsFd`. Throws when it cannot be read. */
  read(netnsFd: number): number;
}

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const NETLINK_NETFILTER = 12;
const NFNL_SUBSYS_NFTABLES = 10;
const NFT_MSG_GETGEN = 16;
const NFT_MSG_NEWGEN = 15;
const NLMSG_ERROR = 2;
const NLM_F_REQUEST = 1;
const NFTA_GEN_ID = 1;
const MSG_DONTWAIT = 0x40;

/** The GETGEN request: nlmsghdr (16 bytes) + nfgenmsg (4 bytes, AF_UNSPEC, NFNETLINK_V0). */
export function getGenRequest(seq: number): Buffer {
  const b = Buffer.alloc(20);
  b.writeUInt32LE(20, 0);
  b.writeUInt16LE((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN, 4);
  b.writeUInt16LE(NLM_F_REQUEST, 6);
  b.writeUInt32LE(seq >>> 0, 8);
  return b;
}

/** The generation from a NEWGEN reply; throws on an error reply or a reply without NFTA_GEN_ID. */
export function parseGenReply(reply: Buffer): number {
  if (reply.length < 16) throw new Error(`short netlink reply (${reply.length} bytes)`);
  const len = reply.readUInt32LE(0);
  const type = reply.readUInt16LE(4);
  if (type === NLMSG_ERROR) throw new Error(`netlink error ${-reply.readInt32LE(16)}`);
  if (type !== ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN)) throw new Error(`unexpected netlink message type ${type}`);
  // Attributes follow the 16-byte header and the 4-byte nfgenmsg, each padded to 4 bytes.
  for (let at = 20; at + 4 <= Math.min(len, reply.length); ) {
    const attrLen = reply.readUInt16LE(at);
    const attrType = reply.readUInt16LE(at + 2) & 0x3fff;
    if (attrLen < 4) break;
    if (attrType === NFTA_GEN_ID && attrLen >= 8) return reply.readUInt32BE(at + 4);
    at += (attrLen + 3) & ~3;
  }
  throw new Error('netlink reply carries no generation');
}

export function createNftGenerationReader(): NftGenerationReader {
  let seq = 1;
  // Reused by every read (each is synchronous): a verification pass allocates nothing per pod here.
  const request = getGenRequest(0);
  const reply = Buffer.alloc(512);
  return {
    read(netnsFd) {
      const libc = netnsLibc();
      const sock = inNetnsSync(libc, netnsFd, () => libc.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER));
      if (sock < 0) throw new Error(`netlink socket failed (errno ${libc.errno()})`);
      try {
        request.writeUInt32LE(seq++ >>> 0, 8);
        if (libc.send(sock, request, request.length, 0) !== request.length) throw new Error(`netlink send failed (errno ${libc.errno()})`);
        const n = libc.recv(sock, reply, reply.length, MSG_DONTWAIT);
        if (n < 0) throw new Error(`netlink recv failed (errno ${libc.errno()})`);
        return parseGenReply(reply.subarray(0, n));
      } finally {
        libc.close(sock);
      }
    },
  };
}
