/**
 * A fake ztunnel speaking ZDS over a real SOCK_SEQPACKET socket: sends the hello, records every
 * request, checks that each received fd is the pod's netns (same inode as the expected path), acks,
 * and on demand delays, refuses (ack with an error), drops the connection (even mid-message) or
 * reconnects. Received netns fds are kept open (like ztunnel, which builds in-pod sockets from them)
 * until the pod is deleted or the fake closes.
 */
import { EventEmitter, once } from 'node:events';
import { fstatSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  closeFd,
  connectSeqpacket,
  decodeWorkloadRequest,
  encodeWorkloadResponse,
  encodeZdsHello,
  SeqpacketError,
  type ReceivedPacket,
  type SeqpacketSocket,
  type WorkloadRequest,
  type ZdsWorkloadInfo,
} from '@istio-cni/dataplane';

export interface FakeAdd {
  uid: string;
  workload: ZdsWorkloadInfo | undefined;
  /** Inode of the received fd (undefined if none arrived). */
  inode: number | undefined;
  /** 1-based connection number this arrived on. */
  session: number;
  /** Part of a snapshot (before SnapshotSent) rather than a live update. */
  inSnapshot: boolean;
}

export type FakeRequestKind = 'add' | 'keep' | 'del' | 'snapshot_sent';

export interface FakeZtunnelOptions {
  path: string;
  /** Version in the hello (default V1 = 1). */
  version?: number;
  /** Raw hello bytes instead of a ZdsHello (garbage tests). */
  helloBytes?: Uint8Array;
  /** Where the netns of a pod lives, to compare inodes; undefined = not checked. */
  expectedNetns?: (uid: string) => string | undefined;
  /** Do not connect yet (call `reconnect()`). */
  deferConnect?: boolean;
}

export interface FakeZtunnel {
  readonly adds: FakeAdd[];
  readonly keeps: string[];
  readonly dels: string[];
  /** Every request in arrival order, e.g. `add:uid`, `snapshot_sent`. */
  readonly log: string[];
  /** Inode mismatches and missing or extra fds: should stay empty. */
  readonly fdProblems: string[];
  /** Number of SnapshotSent received per session (index 0 = first connection). */
  readonly snapshots: number[];
  /** Uids currently known (added or kept, not deleted), after the last snapshot reconciliation. */
  readonly known: Set<string>;
  session: number;
  connected: boolean;
  /** Delay before each ack. */
  ackDelayMs: number;
  /** Error text to put in the ack for a request (undefined = success). */
  refuse: ((request: WorkloadRequest) => string | undefined) | undefined;
  /** Close the connection instead of acking this request (peer gone mid-message). */
  dropOn: ((request: WorkloadRequest) => boolean) | undefined;
  /** The open netns fd received for a pod. */
  netnsFd(uid: string): number | undefined;
  /** Resolves when `predicate` holds (checked after every event). */
  waitFor(predicate: () => boolean, what?: string, timeoutMs?: number): Promise<void>;
  /** Sends raw bytes on the current connection (unsolicited / garbage tests). */
  sendRaw(bytes: Uint8Array): Promise<void>;
  /** Closes the connection; the server should notice and forget this ztunnel. */
  drop(): void;
  /** shutdown(SHUT_RD) on the connection: the server's next write fails with EPIPE, its reads do not notice. */
  shutdownRead(): void;
  /** Drops (if connected) and connects again with a fresh hello. */
  reconnect(): Promise<void>;
  close(): void;
}

function kindOf(request: WorkloadRequest): FakeRequestKind {
  return Object.keys(request)[0] as FakeRequestKind;
}

export async function startFakeZtunnel(options: FakeZtunnelOptions): Promise<FakeZtunnel> {
  const events = new EventEmitter();
  const fds = new Map<string, number>();
  let socket: SeqpacketSocket | undefined;
  let snapshotSeen = new Set<string>();
  let inSnapshot = true;

  const forgetFd = (uid: string): void => {
    const fd = fds.get(uid);
    if (fd !== undefined) closeFd(fd);
    fds.delete(uid);
  };

  const fake: FakeZtunnel = {
    adds: [],
    keeps: [],
    dels: [],
    log: [],
    fdProblems: [],
    snapshots: [],
    known: new Set(),
    session: 0,
    connected: false,
    ackDelayMs: 0,
    refuse: undefined,
    dropOn: undefined,
    netnsFd: (uid) => fds.get(uid),
    async waitFor(predicate, what = 'condition', timeoutMs = 10_000) {
      const timeout = AbortSignal.timeout(timeoutMs);
      while (!predicate()) {
        try {
          await once(events, 'change', { signal: timeout });
        } catch {
          throw new Error(`fake ztunnel: timed out waiting for ${what}; log: ${fake.log.join(', ')}`);
        }
      }
    },
    async sendRaw(bytes) {
      if (socket === undefined) throw new Error('fake ztunnel is not connected');
      await socket.send(bytes, { timeoutMs: 5_000 });
    },
    drop() {
      socket?.close();
      socket = undefined;
      if (fake.connected) {
        fake.connected = false;
        events.emit('change');
      }
    },
    shutdownRead() {
      socket?.shutdown('read');
    },
    async reconnect() {
      fake.drop();
      const s = await connectSeqpacket(options.path);
      socket = s;
      fake.session += 1;
      fake.snapshots.push(0);
      fake.connected = true;
      snapshotSeen = new Set();
      inSnapshot = true;
      await s.send(options.helloBytes ?? encodeZdsHello({ version: options.version ?? 1 }), { timeoutMs: 5_000 });
      events.emit('change');
      void serve(s, fake.session);
    },
    close() {
      fake.drop();
      for (const uid of [...fds.keys()]) forgetFd(uid);
    },
  };

  const record = (request: WorkloadRequest, receivedFds: number[], session: number): void => {
    const kind = kindOf(request);
    if ('add' in request) {
      const { uid } = request.add;
      const fd = receivedFds[0];
      const inode = fd === undefined ? undefined : fstatSync(fd).ino;
      if (receivedFds.length !== 1) fake.fdProblems.push(`add ${uid}: ${receivedFds.length} fds, want 1`);
      const expected = options.expectedNetns?.(uid);
      if (expected !== undefined && inode !== statSync(expected).ino) {
        fake.fdProblems.push(`add ${uid}: fd inode ${inode} is not ${expected} (${statSync(expected).ino})`);
      }
      forgetFd(uid);
      if (fd !== undefined) fds.set(uid, fd);
      for (const extra of receivedFds.slice(1)) closeFd(extra);
      fake.adds.push({ uid, workload: request.add.workload_info ?? undefined, inode, session, inSnapshot });
      fake.known.add(uid);
      if (inSnapshot) snapshotSeen.add(uid);
      fake.log.push(`add:${uid}`);
      return;
    }
    for (const extra of receivedFds) {
      fake.fdProblems.push(`${kind}: unexpected fd`);
      closeFd(extra);
    }
    if ('keep' in request) {
      fake.keeps.push(request.keep.uid);
      if (inSnapshot) snapshotSeen.add(request.keep.uid);
      else fake.fdProblems.push(`keep ${request.keep.uid} after SnapshotSent`);
      fake.known.add(request.keep.uid);
      fake.log.push(`keep:${request.keep.uid}`);
    } else if ('del' in request) {
      fake.dels.push(request.del.uid);
      fake.known.delete(request.del.uid);
      forgetFd(request.del.uid);
      fake.log.push(`del:${request.del.uid}`);
    } else {
      // Like ztunnel: forget every workload that the snapshot neither added nor kept.
      for (const uid of [...fake.known]) {
        if (!snapshotSeen.has(uid)) {
          fake.known.delete(uid);
          forgetFd(uid);
        }
      }
      inSnapshot = false;
      fake.snapshots[session - 1] = (fake.snapshots[session - 1] ?? 0) + 1;
      fake.log.push('snapshot_sent');
    }
  };

  async function serve(s: SeqpacketSocket, session: number): Promise<void> {
    for (;;) {
      let packet: ReceivedPacket;
      try {
        packet = await s.receive({ acceptFds: true, maxBytes: 64 * 1024 });
      } catch (err) {
        if (!(err instanceof SeqpacketError)) throw err;
        if (socket === s) fake.drop();
        return;
      }
      const request = decodeWorkloadRequest(packet.data);
      if (fake.dropOn?.(request)) {
        for (const fd of packet.fds) closeFd(fd);
        fake.log.push(`dropped-on:${kindOf(request)}`);
        fake.drop();
        return;
      }
      record(request, packet.fds, session);
      events.emit('change');
      if (fake.ackDelayMs > 0) await sleep(fake.ackDelayMs);
      const error = fake.refuse?.(request);
      try {
        await s.send(encodeWorkloadResponse({ ack: { error: error ?? '' } }), { timeoutMs: 5_000 });
      } catch {
        if (socket === s) fake.drop();
        return;
      }
      events.emit('change');
    }
  }

  if (options.deferConnect !== true) await fake.reconnect();
  return fake;
}
