/**
 * A client byte stream over a unix socket, on whichever runtime runs us: Bun's own sockets in the
 * plugin (built with Bun's compiler, scripts/build.ts), `node:net` elsewhere (the daemon, tests).
 * Under Bun, `node:net` is a JavaScript layer over the same sockets that the plugin would load and
 * compile on every ADD for one request (docs/decisions.md, "The plugin: Bun"), so it is not
 * imported at all there.
 */

export interface StreamHandlers {
  onConnect(): void;
  onData(chunk: Buffer): void;
  /** Before onConnect: the connect failed (`code` ENOENT, ECONNREFUSED, …). After: the stream broke. */
  onError(err: NodeJS.ErrnoException): void;
  /** The stream is closed (after the peer's end, an error, or destroy()). */
  onClose(): void;
}

export interface UnixStream {
  write(data: Uint8Array): void;
  destroy(): void;
}

/** The part of a Bun socket used here. */
interface BunSocket {
  /** Bytes taken now; the rest is written on `drain`. */
  write(data: Uint8Array): number;
  end(): void;
  terminate(): void;
}

interface BunSocketHandlers {
  open(socket: BunSocket): void;
  data(socket: BunSocket, data: Buffer): void;
  drain(socket: BunSocket): void;
  end(socket: BunSocket): void;
  close(socket: BunSocket): void;
  error(socket: BunSocket, err: Error): void;
  connectError(socket: BunSocket, err: Error): void;
}

interface BunRuntime {
  connect(options: { unix: string; socket: BunSocketHandlers }): Promise<BunSocket>;
}

function bunRuntime(): BunRuntime | undefined {
  return (globalThis as { Bun?: BunRuntime }).Bun;
}

function bunConnect(bun: BunRuntime, path: string, h: StreamHandlers): UnixStream {
  let socket: BunSocket | undefined;
  let destroyed = false;
  let pending: Uint8Array | undefined;
  let failed = false;
  const fail = (err: Error) => {
    if (failed) return;
    failed = true;
    h.onError(err as NodeJS.ErrnoException);
  };
  const flush = (s: BunSocket) => {
    if (pending === undefined) return;
    const n = s.write(pending);
    pending = n >= pending.length ? undefined : pending.subarray(Math.max(0, n));
  };
  // Bun may call a handler before connect() returns (connectError for ENOENT or ECONNREFUSED
  // does): every event is passed on from a microtask, in order, as node:net emits them only once
  // the caller holds the stream.
  const later = (fn: () => void) => queueMicrotask(fn);
  let connecting: Promise<BunSocket>;
  try {
    connecting = bun.connect({
      unix: path,
      socket: {
        open: (s) =>
          later(() => {
            socket = s;
            if (destroyed) s.terminate();
            else h.onConnect();
          }),
        data: (_s, data) => later(() => h.onData(data)),
        drain: (s) => later(() => flush(s)),
        // As node:net without allowHalfOpen: the peer's end ends ours.
        end: (s) => later(() => s.end()),
        close: () => later(() => h.onClose()),
        error: (_s, err) => later(() => fail(err)),
        // Bun's message is only "Failed to connect": name the call as node:net does.
        connectError: (_s, err) =>
          later(() => fail(Object.assign(err, { message: `connect ${(err as NodeJS.ErrnoException).code ?? 'failed'} ${path}` }))),
      },
    });
  } catch (err) {
    // A path Bun refuses outright (too long for sun_path, say): reported like a failed connect.
    connecting = Promise.reject(err as Error);
    later(() => fail(err as Error));
  }
  // connectError has reported a failed connect; the rejection carries the same error.
  connecting.catch(() => {});
  return {
    write(data) {
      if (socket === undefined) return;
      pending = pending === undefined ? data : Buffer.concat([pending, data]);
      flush(socket);
    },
    destroy() {
      destroyed = true;
      socket?.terminate();
    },
  };
}

function nodeConnect(path: string, h: StreamHandlers): UnixStream {
  const { createConnection } = process.getBuiltinModule('node:net');
  const socket = createConnection({ path });
  socket.on('connect', () => h.onConnect());
  socket.on('data', (chunk: Buffer) => h.onData(chunk));
  socket.on('error', (err: NodeJS.ErrnoException) => h.onError(err));
  socket.on('close', () => h.onClose());
  return {
    write: (data) => socket.write(data),
    destroy: () => socket.destroy(),
  };
}

/** Connects to the unix socket at `path`; the handlers see what happens next. */
export function connectUnix(path: string, handlers: StreamHandlers): UnixStream {
  const bun = bunRuntime();
  return bun === undefined ? nodeConnect(path, handlers) : bunConnect(bun, path, handlers);
}
