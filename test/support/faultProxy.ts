/**
 * An HTTP proxy between a client and the (fake) Kubernetes API that misbehaves the way real API
 * servers and their load balancers do: it resets connections (before forwarding, or after the
 * server acted so only the answer is lost), answers 429 with `Retry-After` and 503, closes an idle
 * keep-alive connection at the moment it is reused, restarts (every connection dropped, nothing
 * listening for a while), cuts watch streams in the middle of an event, and holds watch events
 * back (so objects created meanwhile are not in the client's cache and are read directly).
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export type Fault = 'reset' | 'resetAfterForward' | 'tooMany' | 'unavailable';

export interface FaultRates {
  /** Fractions of requests (watches excluded) given each fault, drawn independently per request. */
  reset?: number;
  resetAfterForward?: number;
  tooMany?: number;
  unavailable?: number;
}

export interface FaultCounts {
  requests: number;
  forwarded: number;
  reset: number;
  resetAfterForward: number;
  tooMany: number;
  unavailable: number;
  closedOnReuse: number;
  watchesCut: number;
  restarts: number;
  /** Requests by method (`GET`, `PATCH`, …), watches excluded. */
  byMethod: Record<string, number>;
  /** Requests given a fault (reset, 429, 503, closed on reuse) by method. */
  faultsByMethod: Record<string, number>;
}

export interface FaultProxy {
  url: string;
  port: number;
  counts: FaultCounts;
  setRates(rates: FaultRates): void;
  /** While on, a request arriving on a connection that already served one closes it unanswered. */
  closeIdleOnReuse(on: boolean): void;
  /** Answers the next `n` list requests (GET of a collection, not a watch) with 429. */
  refuseLists(n: number): void;
  /** Cuts every open watch stream in the middle of its next event. */
  cutWatchesMidObject(): void;
  /** While on, watch events are held back; turning it off delivers them, in order. */
  holdWatches(on: boolean): void;
  /** Resolves once `n` more `method` requests have arrived (to act mid-burst); fails after `timeoutMs`. */
  whenRequests(method: string, n: number, timeoutMs: number): Promise<void>;
  /** Drops every connection and stops listening for `downMs`, then listens on the same port again. */
  restart(downMs: number): Promise<void>;
  close(): Promise<void>;
}

/** A small seeded generator, so a failing run's faults can be reproduced. */
function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const isWatch = (url: URL) => url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
const isList = (method: string, url: URL) => method === 'GET' && !isWatch(url) && /^\/api\/v1\/(pods|namespaces)$/.test(url.pathname);

export async function startFaultProxy(upstream: string, options: { seed?: number; port?: number } = {}): Promise<FaultProxy> {
  const target = new URL(upstream);
  const random = seeded(options.seed ?? 1);
  let rates: FaultRates = {};
  let closeOnReuse = false;
  let listsToRefuse = 0;
  let holding = false;
  const counts: FaultCounts = {
    requests: 0,
    forwarded: 0,
    reset: 0,
    resetAfterForward: 0,
    tooMany: 0,
    unavailable: 0,
    closedOnReuse: 0,
    watchesCut: 0,
    restarts: 0,
    byMethod: {},
    faultsByMethod: {},
  };
  const served = new WeakMap<Socket, number>();
  const sockets = new Set<Socket>();
  const watches = new Set<{ cut(): void; release(): void }>();
  const faulted = (method: string): void => {
    counts.faultsByMethod[method] = (counts.faultsByMethod[method] ?? 0) + 1;
  };

  const pick = (): Fault | undefined => {
    const r = random();
    let edge = 0;
    for (const f of ['reset', 'resetAfterForward', 'tooMany', 'unavailable'] as const) {
      edge += rates[f] ?? 0;
      if (r < edge) return f;
    }
    return undefined;
  };
  const status = (res: ServerResponse, code: number, reason: string, headers: Record<string, string> = {}) => {
    const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: `fault proxy: ${reason}`, reason, code });
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(body)), ...headers });
    res.end(body);
  };

  function forward(req: IncomingMessage, res: ServerResponse, url: URL, body: Buffer, loseAnswer: boolean): void {
    counts.forwarded++;
    const up = request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } },
      (upRes) => {
        if (loseAnswer) {
          // The server acted; the client never hears of it.
          upRes.resume();
          upRes.on('end', () => req.socket.destroy());
          return;
        }
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        if (!isWatch(url)) {
          upRes.pipe(res);
          return;
        }
        let cutNext = false;
        let held: Buffer[] = [];
        const deliver = (chunk: Buffer) => {
          if (cutNext && chunk.length > 1) {
            cutNext = false;
            counts.watchesCut++;
            res.write(chunk.subarray(0, Math.floor(chunk.length / 2)), () => req.socket.destroy());
            upRes.destroy();
            return;
          }
          res.write(chunk);
        };
        const watch = {
          cut: () => {
            cutNext = true;
          },
          release() {
            const chunks = held;
            held = [];
            for (const c of chunks) if (!res.destroyed) deliver(c);
          },
        };
        watches.add(watch);
        upRes.on('data', (chunk: Buffer) => {
          if (holding) held.push(chunk);
          else deliver(chunk);
        });
        upRes.on('end', () => {
          watch.release();
          res.end();
        });
        upRes.on('close', () => watches.delete(watch));
        res.on('close', () => upRes.destroy());
      },
    );
    up.on('error', () => req.socket.destroy());
    up.end(body);
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const n = served.get(req.socket) ?? 0;
      served.set(req.socket, n + 1);
      counts.requests++;
      const method = req.method ?? '';
      if (!isWatch(url)) counts.byMethod[method] = (counts.byMethod[method] ?? 0) + 1;
      if (closeOnReuse && n > 0) {
        counts.closedOnReuse++;
        faulted(method);
        req.socket.destroy();
        return;
      }
      if (listsToRefuse > 0 && isList(req.method ?? '', url)) {
        listsToRefuse--;
        counts.tooMany++;
        faulted(method);
        status(res, 429, 'TooManyRequests', { 'Retry-After': '1' });
        return;
      }
      const fault = isWatch(url) ? undefined : pick();
      if (fault !== undefined) faulted(method);
      if (fault === 'reset') {
        counts.reset++;
        req.socket.resetAndDestroy();
        return;
      }
      if (fault === 'tooMany') {
        counts.tooMany++;
        status(res, 429, 'TooManyRequests', { 'Retry-After': '1' });
        return;
      }
      if (fault === 'unavailable') {
        counts.unavailable++;
        status(res, 503, 'ServiceUnavailable');
        return;
      }
      if (fault === 'resetAfterForward') counts.resetAfterForward++;
      forward(req, res, url, Buffer.concat(chunks), fault === 'resetAfterForward');
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listen(options.port ?? 0);
  const port = (server.address() as AddressInfo).port;
  const dropAll = () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    counts,
    setRates: (r) => {
      rates = r;
    },
    closeIdleOnReuse: (on) => {
      closeOnReuse = on;
    },
    refuseLists: (n) => {
      listsToRefuse = n;
    },
    cutWatchesMidObject() {
      for (const w of watches) w.cut();
    },
    async whenRequests(method, n, timeoutMs) {
      const target = (counts.byMethod[method] ?? 0) + n;
      const deadline = Date.now() + timeoutMs;
      while ((counts.byMethod[method] ?? 0) < target) {
        if (Date.now() > deadline)
          throw new Error(
            `fault proxy: ${n} ${method} requests did not arrive within ${timeoutMs} ms (${JSON.stringify(counts.byMethod)})`,
          );
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    holdWatches(on) {
      holding = on;
      if (!on) for (const w of watches) w.release();
    },
    async restart(downMs) {
      counts.restarts++;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      dropAll();
      await closed;
      await new Promise((r) => setTimeout(r, downMs));
      await listen(port);
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      dropAll();
      await closed;
    },
  };
}
