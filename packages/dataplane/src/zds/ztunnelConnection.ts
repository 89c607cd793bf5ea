/**
 * One ztunnel connection (upstream `ztunnelserver.go`): hello, snapshot, then a single loop that sends queued
 * updates one at a time and waits for each ack. Acks correlate with requests only by order, so
 * nothing but this loop ever writes to or reads from the socket.
 */
import { randomUUID } from 'node:crypto';
import { SeqpacketError } from '../seqpacket/seqpacketError.ts';
import { closeFd, duplicateFd, type SeqpacketSocket } from '../seqpacket/seqpacketSocket.ts';
import type { PodSnapshotSource, WorkloadInfo, ZdsLogger } from './podSnapshotSource.ts';
import { ZdsError } from './zdsError.ts';
import {
  decodeWorkloadResponse,
  decodeZdsHello,
  encodeWorkloadRequest,
  ZDS_VERSION,
  type WorkloadRequest,
  type WorkloadResponse,
  type ZdsWorkloadInfo,
} from './zdsSchema.ts';

export interface ZtunnelConnectionOptions {
  socket: SeqpacketSocket;
  pods: PodSnapshotSource;
  logger: ZdsLogger;
  /** Hello, per-message write and ack deadlines (upstream 5 s). */
  readWriteTimeoutMs: number;
  /** Longest idle stretch between liveness checks (upstream 5 s). */
  keepaliveIntervalMs: number;
}

interface Pending {
  request: WorkloadRequest;
  /** Private duplicate of the netns fd, closed once the request is done with. */
  fd: number | undefined;
  settled: boolean;
  resolve(response: WorkloadResponse): void;
  reject(err: Error): void;
}

/** Errors after which the connection cannot be trusted any more (vs. a timeout, which upstream survives). */
const fatal = new WeakSet<Error>();

function fatalError(err: ZdsError): ZdsError {
  fatal.add(err);
  return err;
}

export function toZdsWorkloadInfo(workload: WorkloadInfo): ZdsWorkloadInfo {
  return { name: workload.name, namespace: workload.namespace, service_account: workload.serviceAccount };
}

export class ZtunnelConnection {
  readonly uuid = randomUUID();
  readonly #socket: SeqpacketSocket;
  readonly #opts: ZtunnelConnectionOptions;
  readonly #log: ZdsLogger;
  readonly #queue: Pending[] = [];
  #wake: (() => void) | undefined;
  #closed = false;
  /** Pods ztunnel acked (add or keep without error, not deleted since); complete once the snapshot is sent. */
  readonly #acked = new Set<string>();
  #snapshotSent = false;

  constructor(options: ZtunnelConnectionOptions) {
    this.#socket = options.socket;
    this.#opts = options;
    const conn = { conn_uuid: this.uuid };
    const l = options.logger;
    this.#log = {
      debug: (m, f) => l.debug(m, { ...conn, ...f }),
      info: (m, f) => l.info(m, { ...conn, ...f }),
      warn: (m, f) => l.warn(m, { ...conn, ...f }),
      error: (m, f) => l.error(m, { ...conn, ...f }),
    };
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Whether ztunnel acked the pod on this connection; `undefined` until the snapshot is sent. */
  hasPod(uid: string): boolean | undefined {
    return this.#snapshotSent ? this.#acked.has(uid) : undefined;
  }

  #track(request: WorkloadRequest, response: WorkloadResponse): void {
    const ok = !response.ack?.error;
    if ('add' in request || 'keep' in request) {
      const uid = 'add' in request ? request.add.uid : request.keep.uid;
      if (ok) this.#acked.add(uid);
      else this.#acked.delete(uid);
    } else if ('del' in request && ok) {
      this.#acked.delete(request.del.uid);
    } else if ('snapshot_sent' in request) {
      this.#snapshotSent = true;
    }
  }

  /**
   * Queues a request for this connection and resolves with ztunnel's response. `fd` is duplicated
   * right away, so the caller may close its own copy as soon as this returns.
   */
  send(request: WorkloadRequest, fd?: number, signal?: AbortSignal): Promise<WorkloadResponse> {
    if (this.#closed) return Promise.reject(this.#closedError());
    if (signal?.aborted) return Promise.reject(new ZdsError('ERR_ZDS_ABORTED', 'request aborted before it was sent to ztunnel'));
    const dup = fd === undefined ? undefined : duplicateFd(fd);
    return new Promise<WorkloadResponse>((resolve, reject) => {
      const pending: Pending = { request, fd: dup, settled: false, resolve, reject };
      signal?.addEventListener('abort', () => settle(pending, new ZdsError('ERR_ZDS_ABORTED', 'request aborted before ztunnel answered')), {
        once: true,
      });
      this.#queue.push(pending);
      this.#wake?.();
    });
  }

  /** Serves the connection until it fails or is closed; never rejects. */
  async run(): Promise<void> {
    try {
      const hello = await this.#readHello();
      this.#log.info('received hello from ztunnel', { version: hello.version });
      await this.#sendSnapshot();
      while (!this.#closed) {
        const next = this.#queue.shift();
        if (next !== undefined) await this.#process(next);
        else await this.#idle();
      }
    } catch (err) {
      if (!this.#closed) this.#reportEnd(err as Error);
    } finally {
      this.close();
    }
  }

  /** Closes the socket and fails every queued request. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.close();
    this.#wake?.();
    for (const pending of this.#queue.splice(0)) {
      settle(pending, this.#closedError());
      release(pending);
    }
  }

  #closedError(): ZdsError {
    return new ZdsError('ERR_ZDS_CONNECTION_CLOSED', `ztunnel connection ${this.uuid} closed`);
  }

  #reportEnd(err: Error): void {
    if (
      err instanceof ZdsError &&
      err.code === 'ERR_ZDS_CONNECTION_CLOSED' &&
      err.cause instanceof SeqpacketError &&
      err.cause.code === 'ERR_SEQPACKET_EOF'
    ) {
      this.#log.info('ztunnel disconnected (EOF)');
      return;
    }
    this.#log.error('failed to handle ztunnel connection, closing it', { error: err.message });
  }

  async #readHello(): Promise<{ version: number }> {
    const packet = await this.#receive('hello');
    let hello: { version: number };
    try {
      hello = decodeZdsHello(packet);
    } catch (err) {
      throw fatalError(new ZdsError('ERR_ZDS_PROTOCOL', `failed to decode ztunnel hello: ${(err as Error).message}`, { cause: err }));
    }
    if (hello.version !== ZDS_VERSION.V1) {
      throw fatalError(new ZdsError('ERR_ZDS_PROTOCOL', `ztunnel hello has unsupported version ${hello.version}, want ${ZDS_VERSION.V1}`));
    }
    return hello;
  }

  async #sendSnapshot(): Promise<void> {
    // Duplicate every fd in the same tick as the read: the cache may close its copies later.
    const items = [...this.#opts.pods.readCurrentPodSnapshot()].map(([uid, entry]) => ({
      uid,
      workload: entry.workload,
      fd: this.#dupForSnapshot(uid, entry.netnsFd),
    }));
    try {
      for (const item of items) {
        const log = { uid: item.uid, ...item.workload };
        const request: WorkloadRequest =
          item.fd === undefined
            ? { keep: { uid: item.uid } }
            : { add: item.workload === undefined ? { uid: item.uid } : { uid: item.uid, workload_info: toZdsWorkloadInfo(item.workload) } };
        this.#log.info(
          item.fd === undefined
            ? "netns is not available for pod, sending 'keep' to ztunnel"
            : 'sending pod to ztunnel as part of snapshot',
          log,
        );
        const response = await this.#exchange(request, item.fd);
        if (item.fd !== undefined) closeFd(item.fd);
        item.fd = undefined;
        if (response.ack?.error) this.#log.error('snapshot: got ack error', { ...log, ack_error: response.ack.error });
      }
      const response = await this.#exchange({ snapshot_sent: {} }, undefined);
      if (response.ack?.error) this.#log.error('snapshot sent: got ack error', { ack_error: response.ack.error });
      this.#log.debug('snapshot sent to ztunnel', { pods: items.length });
    } finally {
      for (const item of items) if (item.fd !== undefined) closeFd(item.fd);
    }
  }

  #dupForSnapshot(uid: string, fd: number | undefined): number | undefined {
    if (fd === undefined) return undefined;
    try {
      return duplicateFd(fd);
    } catch (err) {
      // A dead fd in the cache is a bug elsewhere; Keep at least stops ztunnel dropping the pod.
      this.#log.error('failed to duplicate cached netns fd, sending keep', { uid, error: (err as Error).message });
      return undefined;
    }
  }

  async #process(pending: Pending): Promise<void> {
    if (pending.settled) return release(pending);
    try {
      const response = await this.#exchange(pending.request, pending.fd);
      settle(pending, response);
    } catch (err) {
      settle(pending, err as Error);
      if (fatal.has(err as Error)) throw err;
      this.#log.warn('timed out waiting for valid ztunnel response', { error: (err as Error).message });
    } finally {
      release(pending);
    }
  }

  /**
   * Waits for the next update while watching the socket: ztunnel never speaks unprompted, so
   * anything readable is a hang-up (EOF) or a protocol error. This keeps upstream's 5 s keepalive
   * probe (a read that must time out) but notices a dead peer as soon as it goes.
   */
  async #idle(): Promise<void> {
    const abort = new AbortController();
    this.#wake = () => abort.abort();
    try {
      await this.#socket.receive({ timeoutMs: this.#opts.keepaliveIntervalMs, signal: abort.signal });
    } catch (err) {
      const code = err instanceof SeqpacketError ? err.code : undefined;
      if (code === 'ERR_SEQPACKET_ABORTED' || code === 'ERR_SEQPACKET_TIMEOUT' || code === 'ERR_SEQPACKET_CLOSED') return;
      throw this.#receiveFailure('keepalive', err as Error);
    } finally {
      this.#wake = undefined;
    }
    throw fatalError(new ZdsError('ERR_ZDS_PROTOCOL', 'ztunnel protocol error, unexpected message'));
  }

  async #exchange(request: WorkloadRequest, fd: number | undefined): Promise<WorkloadResponse> {
    const what = Object.keys(request)[0] ?? 'request';
    try {
      await this.#socket.send(encodeWorkloadRequest(request), { fd, timeoutMs: this.#opts.readWriteTimeoutMs });
    } catch (err) {
      const e = err as Error;
      if (e instanceof SeqpacketError && e.code === 'ERR_SEQPACKET_TIMEOUT') {
        throw new ZdsError('ERR_ZDS_TIMEOUT', `failed to send ${what} to ztunnel: ${e.message}`, { cause: e });
      }
      throw fatalError(new ZdsError('ERR_ZDS_SEND_FAILED', `failed to send ${what} to ztunnel: ${e.message}`, { cause: e }));
    }
    const packet = await this.#receive(`ack of ${what}`);
    let response: WorkloadResponse;
    try {
      response = decodeWorkloadResponse(packet);
    } catch (err) {
      throw fatalError(
        new ZdsError('ERR_ZDS_PROTOCOL', `failed to decode ztunnel response to ${what}: ${(err as Error).message}`, { cause: err }),
      );
    }
    if (response.ack === undefined) throw fatalError(new ZdsError('ERR_ZDS_PROTOCOL', `ztunnel response to ${what} carries no ack`));
    this.#track(request, response);
    return response;
  }

  async #receive(what: string): Promise<Buffer> {
    try {
      return (await this.#socket.receive({ maxBytes: 1024, timeoutMs: this.#opts.readWriteTimeoutMs })).data;
    } catch (err) {
      throw this.#receiveFailure(what, err as Error);
    }
  }

  #receiveFailure(what: string, err: Error): ZdsError {
    const code = err instanceof SeqpacketError ? err.code : undefined;
    if (code === 'ERR_SEQPACKET_TIMEOUT') return new ZdsError('ERR_ZDS_TIMEOUT', `timed out waiting for ztunnel ${what}`, { cause: err });
    if (code === 'ERR_SEQPACKET_EOF' || code === 'ERR_SEQPACKET_CLOSED') {
      return fatalError(new ZdsError('ERR_ZDS_CONNECTION_CLOSED', `ztunnel connection closed while waiting for ${what}`, { cause: err }));
    }
    if (code === 'ERR_SEQPACKET_TRUNCATED')
      return fatalError(new ZdsError('ERR_ZDS_PROTOCOL', `bad ztunnel ${what}: ${err.message}`, { cause: err }));
    return fatalError(new ZdsError('ERR_ZDS_CONNECTION_CLOSED', `failed to read ztunnel ${what}: ${err.message}`, { cause: err }));
  }
}

function settle(pending: Pending, outcome: WorkloadResponse | Error): void {
  if (pending.settled) return;
  pending.settled = true;
  if (outcome instanceof Error) pending.reject(outcome);
  else pending.resolve(outcome);
}

function release(pending: Pending): void {
  if (pending.fd === undefined) return;
  closeFd(pending.fd);
  pending.fd = undefined;
}
