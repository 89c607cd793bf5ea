import { chmod, mkdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { dirname } from 'node:path';
import type { Socket } from 'node:net';
import { ErrorCode, errorMessage } from '@istio-cni/cni';
import { defaultPeerUids, refusedPeer } from '@istio-cni/dataplane';
import { DOCTOR_PATH } from '../doctor/doctorReport.ts';
import {
  HANDOFF_PATH,
  MAX_REQUEST_BYTES,
  MIN_PROTOCOL,
  PROTOCOL,
  RUN_DIR_MODE,
  ProtocolError,
  isSupportedProtocol,
  parseHandoffRequest,
  type HandoffError,
  type HandoffRequest,
  type HandoffResponse,
  type HandoffVerdict,
  type Logger,
} from '@istio-cni/handoff';

/** Decides one CNI invocation. Throwing is an internal error (code 999) for that invocation only. */
export type HandoffHandler = (request: HandoffRequest) => Promise<HandoffVerdict | { error: HandoffError }>;

/** The daemon's view for `install-cni doctor` (`DOCTOR_PATH`, same root-only socket; no secrets). */
export type DoctorHandler = (pod: string | undefined) => Promise<unknown>;

export interface HandoffServerOptions {
  socketPath: string;
  handler: HandoffHandler;
  logger: Logger;
  doctor?: DoctorHandler;
  /**
   * Peers (SO_PEERCRED uid) allowed to connect, beyond the socket's 0600 mode: default root (the
   * runtime runs the plugin as root) and this process's own uid. Anyone else is disconnected unread.
   */
  peerUids?: ReadonlySet<number>;
}

/** The file descriptor under a unix socket's libuv handle (a documented-internal field; absent on Windows). */
function socketFd(socket: Socket): number | undefined {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

export interface HandoffServer {
  close(): Promise<void>;
}

class RequestTooLarge extends Error {}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // Past the limit the rest is drained and discarded, so the 413 answer still reaches the client.
      if (size <= MAX_REQUEST_BYTES) chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > MAX_REQUEST_BYTES) reject(new RequestTooLarge(`request body exceeds ${MAX_REQUEST_BYTES} bytes`));
      else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: HandoffResponse): void {
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': payload.length });
  res.end(payload);
}

function fail(res: ServerResponse, status: number, code: number, msg: string): void {
  send(res, status, { protocol: PROTOCOL, error: { code, msg } });
}

async function serveDoctor(req: IncomingMessage, res: ServerResponse, doctor: DoctorHandler): Promise<void> {
  let pod: string | undefined;
  try {
    const body = JSON.parse((await readBody(req)) || '{}') as { pod?: unknown };
    pod = typeof body.pod === 'string' && body.pod !== '' ? body.pod : undefined;
  } catch (err) {
    res.writeHead(400, { 'Content-Type': 'text/plain' }).end(`malformed doctor request: ${errorMessage(err)}`);
    return;
  }
  const payload = Buffer.from(JSON.stringify(await doctor(pod)));
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': payload.length });
  res.end(payload);
}

async function serve(req: IncomingMessage, res: ServerResponse, opts: HandoffServerOptions): Promise<void> {
  if (req.method === 'POST' && req.url === DOCTOR_PATH && opts.doctor !== undefined) return serveDoctor(req, res, opts.doctor);
  if (req.method !== 'POST' || req.url !== HANDOFF_PATH) {
    fail(res, 404, ErrorCode.InvalidEnvironment, `no handler for ${req.method} ${req.url}`);
    return;
  }
  let request: HandoffRequest;
  try {
    request = parseHandoffRequest(JSON.parse(await readBody(req)));
  } catch (err) {
    const status = err instanceof RequestTooLarge ? 413 : 400;
    const msg = err instanceof ProtocolError || err instanceof SyntaxError ? err.message : String(err);
    opts.logger.warn('rejected malformed hand-off request', { error: msg });
    fail(res, status, ErrorCode.DecodingFailure, `malformed hand-off request: ${msg}`);
    return;
  }
  if (!isSupportedProtocol(request.protocol)) {
    fail(
      res,
      400,
      ErrorCode.IncompatibleVersion,
      `hand-off protocol ${request.protocol} not supported (agent speaks ${MIN_PROTOCOL}..${PROTOCOL})`,
    );
    return;
  }
  try {
    const outcome = await opts.handler(request);
    if ('error' in outcome) send(res, 500, { protocol: PROTOCOL, error: outcome.error });
    else send(res, 200, { ...outcome, protocol: PROTOCOL });
  } catch (err) {
    const msg = errorMessage(err);
    opts.logger.error('hand-off handler failed', {
      pod: `${request.pod.namespace}/${request.pod.name}`,
      command: request.command,
      error: msg,
    });
    fail(res, 500, ErrorCode.Internal, msg);
  }
}

/**
 * Listens on the plugin event socket. The socket is root-only (0600): only the runtime's plugin
 * process, running as root, talks to it (docs/architecture.md "Where we differ from upstream").
 */
export async function startHandoffServer(opts: HandoffServerOptions): Promise<HandoffServer> {
  await mkdir(dirname(opts.socketPath), { recursive: true, mode: RUN_DIR_MODE });
  await rm(opts.socketPath, { force: true });
  const server: Server = createServer((req, res) => {
    serve(req, res, opts).catch((err: unknown) => {
      opts.logger.error('hand-off request failed', { error: String(err) });
      if (!res.headersSent) fail(res, 500, ErrorCode.Internal, 'internal error');
    });
  });
  server.keepAliveTimeout = 1000;
  const peerUids = opts.peerUids ?? defaultPeerUids();
  server.on('connection', (socket: Socket) => {
    const fd = socketFd(socket);
    const refused = fd === undefined ? { error: 'no file descriptor to read the peer from' } : refusedPeer(fd, peerUids);
    if (refused === undefined) return;
    opts.logger.warn('refused a hand-off connection from a process that is not the plugin (peer uid not allowed)', refused);
    socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // A restrictive umask closes the window between bind() and chmod().
    const previous = process.umask(0o177);
    try {
      server.listen(opts.socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    } finally {
      process.umask(previous);
    }
  });
  await chmod(opts.socketPath, 0o600);
  opts.logger.info('hand-off server listening', { socket: opts.socketPath });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }).then(() => rm(opts.socketPath, { force: true })),
  };
}
