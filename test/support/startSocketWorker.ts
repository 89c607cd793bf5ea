import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import type { LandedAt, WorkerRequest } from './socketWorker.ts';

const workerScript = fileURLToPath(new URL('./socketWorker.ts', import.meta.url));

export interface SocketWorker {
  /** Listens and resolves once the socket is bound and listening. */
  listen(req: Omit<Extract<WorkerRequest, { op: 'listen' }>, 'op'>): Promise<{ port: number }>;
  /** Connects (or sends one datagram) and resolves with where it landed. */
  connect(req: Omit<Extract<WorkerRequest, { op: 'connect' }>, 'op' | 'timeoutMs'> & { timeoutMs?: number }): Promise<LandedAt>;
  close(): Promise<void>;
}

export interface SocketWorkerOptions {
  netns: string;
  uid?: number;
  gid?: number;
  /** Bound on worker start-up and on each request. */
  timeoutMs?: number;
}

/**
 * Starts `socketWorker.ts` on the pinned Node inside `netns` (`nsenter --net=<path>`) and resolves
 * once it reports ready. The worker starts as root and becomes `uid`/`gid` itself once its modules
 * are loaded: the checkout may sit under a directory only root can enter (a clone in `/root`, a
 * `mktemp -d`), where `nsenter --setuid` could not even execute Node.
 */
export async function startSocketWorker(options: SocketWorkerOptions): Promise<SocketWorker> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' };
  if (options.uid !== undefined) env.SOCKET_WORKER_UID = String(options.uid);
  if (options.gid !== undefined) env.SOCKET_WORKER_GID = String(options.gid);
  const child = spawn('nsenter', [`--net=${options.netns}`, '--', process.execPath, workerScript], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env,
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let ready: (() => void) | undefined;
  let readyTimer: NodeJS.Timeout | undefined;
  const readyPromise = new Promise<void>((resolve, reject) => {
    ready = resolve;
    readyTimer = setTimeout(() => reject(new Error(`socket worker not ready within ${timeoutMs} ms: ${stderr}`)), timeoutMs);
    child.once('close', (code) => reject(new Error(`socket worker exited with ${code}: ${stderr}`)));
  });
  createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line) as { ready?: boolean; id?: number; ok?: boolean; value?: unknown; error?: string };
    if (msg.ready === true) return ready?.();
    const p = msg.id === undefined ? undefined : pending.get(msg.id);
    if (p === undefined) return;
    pending.delete(msg.id as number);
    if (msg.ok === true) p.resolve(msg.value);
    else p.reject(new Error(msg.error ?? 'unknown worker error'));
  });
  child.once('close', () => {
    for (const p of pending.values()) p.reject(new Error(`socket worker exited: ${stderr}`));
    pending.clear();
  });
  try {
    await readyPromise;
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  } finally {
    clearTimeout(readyTimer);
  }
  let nextId = 0;
  const request = (req: WorkerRequest): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const id = ++nextId;
      pending.set(id, { resolve, reject });
      child.stdin.write(`${JSON.stringify({ id, ...req })}\n`);
    });
  return {
    listen: (req) => request({ op: 'listen', ...req }) as Promise<{ port: number }>,
    connect: (req) => request({ op: 'connect', timeoutMs, ...req }) as Promise<LandedAt>,
    async close() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * A starter for socket workers that all close when the test ends: `start(netns)` as root, or
 * `start(netns, uid)` as that uid (and gid).
 */
export function socketWorkers(t: { after(fn: () => Promise<unknown>): void }): (netns: string, uid?: number) => Promise<SocketWorker> {
  const workers: SocketWorker[] = [];
  t.after(() => Promise.all(workers.map((w) => w.close())));
  return async (netns, uid) => {
    const w = await startSocketWorker(uid === undefined ? { netns } : { netns, uid, gid: uid });
    workers.push(w);
    return w;
  };
}
