/**
 * The ZDS server ztunnel connects to (upstream `ztunnelserver.go`): a SOCK_SEQPACKET
 * listener; per connection a hello, the pod snapshot and then updates. Adds go to the newest
 * connection only (the ztunnel that got the latest snapshot), deletes to all of them.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { defaultPeerUids, refusedPeer } from '../seqpacket/peerCredentials.ts';
import { SeqpacketError } from '../seqpacket/seqpacketError.ts';
import { listenSeqpacket, type SeqpacketListener } from '../seqpacket/seqpacketListener.ts';
import { silentZdsLogger, type PodSnapshotSource, type WorkloadInfo, type ZdsLogger } from './podSnapshotSource.ts';
import { ZdsError } from './zdsError.ts';
import { toZdsWorkloadInfo, ZtunnelConnection } from './ztunnelConnection.ts';

export interface ZtunnelServerOptions {
  /** `ZTUNNEL_UDS_ADDRESS` (default upstream `/var/run/ztunnel/ztunnel.sock`); `@name` = abstract. */
  path: string;
  pods: PodSnapshotSource;
  logger?: ZdsLogger;
  /** Called with the number of connections whenever it changes (the `ztunnel_connected` gauge). */
  onConnectionCount?: (count: number) => void;
  /** Socket file mode. ztunnel runs as root without CAP_DAC_OVERRIDE, and owner bits suffice. */
  socketMode?: number;
  readWriteTimeoutMs?: number;
  keepaliveIntervalMs?: number;
  /** Accept rate limit (token bucket, burst 1); upstream 5/s against a ztunnel reconnecting in a loop. */
  acceptsPerSecond?: number;
  /**
   * Peers (SO_PEERCRED uid) allowed to connect, beyond upstream's file mode alone; default root and
   * this process's own uid. Anyone else is disconnected before the hello and never sees a pod.
   */
  peerUids?: ReadonlySet<number>;
}

export interface RequestOptions {
  /** Gives up waiting (ERR_ZDS_ABORTED); a request already sent still completes on the connection. */
  signal?: AbortSignal;
}

export interface ZtunnelServer {
  readonly path: string;
  /** Starts accepting connections (upstream `Run`); connections queue in the backlog until then. */
  start(): void;
  /**
   * Sends `Add` with the netns fd to the newest ztunnel and resolves on a clean ack. Fails with a
   * retryable ZdsError: ERR_ZDS_NO_CONNECTION when no ztunnel is connected, ERR_ZDS_ACK_ERROR when
   * it answers with an error, or the connection error. `netnsFd` is duplicated before returning.
   */
  podAdded(uid: string, workload: WorkloadInfo, netnsFd: number, options?: RequestOptions): Promise<void>;
  /** Sends `Del` to every connected ztunnel; rejects with the joined errors of those that failed. */
  podDeleted(uid: string, options?: RequestOptions): Promise<void>;
  connectionCount(): number;
  /**
   * Whether the newest ztunnel (the one pods are sent to) acked the pod; `undefined` while no
   * ztunnel is connected or its snapshot is still being sent.
   */
  hasPod(uid: string): boolean | undefined;
  /** Stops accepting, closes every connection and waits for their handlers. */
  close(): Promise<void>;
}

/** Listens at once (stale socket replaced); accepting starts with `start()`. */
export function createZtunnelServer(options: ZtunnelServerOptions): ZtunnelServer {
  const logger = options.logger ?? silentZdsLogger;
  const peerUids = options.peerUids ?? defaultPeerUids();
  const listener = listenSeqpacket(options.path, { mode: options.socketMode ?? 0o600 });
  const connections: ZtunnelConnection[] = [];
  const handlers = new Set<Promise<void>>();
  let acceptLoop: Promise<void> | undefined;
  let closing = false;

  const publish = (): void => options.onConnectionCount?.(connections.length);
  publish();

  const serve = (conn: ZtunnelConnection): void => {
    // Listed before the hello, as upstream does, so the gauge counts handshaking ztunnels too.
    connections.push(conn);
    logger.info('new ztunnel connected', { conn_uuid: conn.uuid, total_connected: connections.length });
    publish();
    const handler = conn.run().finally(() => {
      const at = connections.indexOf(conn);
      if (at >= 0) connections.splice(at, 1);
      logger.info('ztunnel disconnected', { conn_uuid: conn.uuid, total_connected: connections.length });
      publish();
      handlers.delete(handler);
    });
    handlers.add(handler);
  };

  const runAcceptLoop = async (l: SeqpacketListener): Promise<void> => {
    const interval = 1000 / (options.acceptsPerSecond ?? 5);
    let last = -Infinity;
    while (!closing) {
      const wait = last + interval - performance.now();
      if (wait > 0) await sleep(wait);
      if (closing) return;
      last = performance.now();
      try {
        const socket = await l.accept();
        if (closing) {
          socket.close();
          return;
        }
        const refused = refusedPeer(socket.fd, peerUids);
        if (refused !== undefined) {
          logger.warn('refused a ZDS connection from a process that is not ztunnel (peer uid not allowed)', refused);
          socket.close();
          continue;
        }
        serve(
          new ZtunnelConnection({
            socket,
            pods: options.pods,
            logger,
            readWriteTimeoutMs: options.readWriteTimeoutMs ?? 5_000,
            keepaliveIntervalMs: options.keepaliveIntervalMs ?? 5_000,
          }),
        );
      } catch (err) {
        if (err instanceof SeqpacketError && err.code === 'ERR_SEQPACKET_CLOSED') return;
        logger.error('failed to accept ztunnel connection', { error: (err as Error).message });
      }
    }
  };

  return {
    path: options.path,
    start() {
      if (closing) throw new ZdsError('ERR_ZDS_CONNECTION_CLOSED', `ztunnel server on ${options.path} is closed`);
      acceptLoop ??= runAcceptLoop(listener);
    },
    async podAdded(uid, workload, netnsFd, requestOptions = {}) {
      if (uid === '' || !Number.isInteger(netnsFd) || netnsFd < 0) {
        throw new ZdsError('ERR_ZDS_INVALID_ARGUMENT', `invalid pod add: uid ${JSON.stringify(uid)}, netns fd ${netnsFd}`);
      }
      const latest = connections.at(-1);
      if (latest === undefined) throw new ZdsError('ERR_ZDS_NO_CONNECTION', 'no ztunnel connection');
      const fields = {
        uid,
        name: workload.name,
        namespace: workload.namespace,
        serviceAccount: workload.serviceAccount,
        conn_uuid: latest.uuid,
      };
      logger.info('sending pod add to ztunnel', fields);
      const response = await latest.send({ add: { uid, workload_info: toZdsWorkloadInfo(workload) } }, netnsFd, requestOptions.signal);
      const ackError = response.ack?.error ?? '';
      if (ackError !== '') {
        logger.error('failed to add workload', { ...fields, ack_error: ackError });
        throw new ZdsError('ERR_ZDS_ACK_ERROR', `got ack error: ${ackError}`);
      }
      logger.debug('sent pod add to ztunnel', fields);
    },
    async podDeleted(uid, requestOptions = {}) {
      if (uid === '') throw new ZdsError('ERR_ZDS_INVALID_ARGUMENT', 'invalid pod delete: empty uid');
      // No lock is held while waiting: a connection that goes away fails its own request only.
      const results = await Promise.allSettled(connections.map((conn) => conn.send({ del: { uid } }, undefined, requestOptions.signal)));
      const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
      if (failures.length === 0) return;
      const message = failures.map((e) => e.message).join('; ');
      throw new ZdsError(
        failures.length === 1 && failures[0] instanceof ZdsError ? failures[0].code : 'ERR_ZDS_SEND_FAILED',
        `failed to delete pod ${uid} in ztunnel: ${message}`,
        {
          cause: failures.length === 1 ? failures[0] : new AggregateError(failures),
        },
      );
    },
    connectionCount: () => connections.length,
    hasPod: (uid) => connections.at(-1)?.hasPod(uid),
    async close() {
      closing = true;
      listener.close();
      for (const conn of [...connections]) conn.close();
      await acceptLoop;
      await Promise.all([...handlers]);
    },
  };
}
