/**
 * A child process that opens sockets on request, run inside a netns as some uid by
 * `startSocketWorker`. Protocol: one JSON request per stdin line `{id, op, ...}`, one JSON answer per
 * stdout line `{id, ok, value|error}`; `{"ready":true}` first. Listeners answer every client with a
 * JSON line saying which listener got it and what destination it saw, so a client learns where its
 * connection really landed. Exits when stdin closes.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createInterface } from 'node:readline';
import net from 'node:net';
import { makeTransparent, originalDestination } from './socketOptions.ts';

export type WorkerRequest =
  | { op: 'listen'; proto: 'tcp' | 'udp'; host: string; port: number; name: string; transparent?: boolean }
  | { op: 'connect'; proto: 'tcp' | 'udp'; host: string; port: number; timeoutMs: number };

/** What a listener tells each client. */
export interface LandedAt {
  listener: string;
  local: { address: string; port: number };
  originalDst?: { address: string; port: number };
}

/** Becomes the uid/gid asked for (all capabilities go with root), after every module is loaded. */
function dropPrivileges(): void {
  const gid = process.env.SOCKET_WORKER_GID;
  const uid = process.env.SOCKET_WORKER_UID;
  const { setgroups, setgid, setuid } = process;
  if (setgroups === undefined || setgid === undefined || setuid === undefined) throw new Error('no set*id on this platform');
  if (gid !== undefined) {
    setgroups([Number(gid)]);
    setgid(Number(gid));
  }
  if (uid !== undefined) setuid(Number(uid));
}
dropPrivileges();

const closers: (() => void)[] = [];

async function listen(req: Extract<WorkerRequest, { op: 'listen' }>): Promise<{ port: number }> {
  const family = req.host.includes(':') ? 'IPv6' : 'IPv4';
  if (req.proto === 'udp') {
    const sock: UdpSocket = createSocket(family === 'IPv6' ? { type: 'udp6', ipv6Only: true } : { type: 'udp4' });
    sock.on('message', (_msg, rinfo) => {
      const addr = sock.address();
      const landed: LandedAt = { listener: req.name, local: { address: addr.address, port: addr.port } };
      sock.send(JSON.stringify(landed), rinfo.port, rinfo.address);
    });
    await new Promise<void>((resolve, reject) => {
      sock.once('error', reject);
      sock.bind(req.port, req.host, () => resolve());
    });
    closers.push(() => sock.close());
    return { port: sock.address().port };
  }
  const server = net.createServer((c) => {
    c.on('error', () => {});
    const landed: LandedAt = {
      listener: req.name,
      local: { address: c.localAddress ?? '', port: c.localPort ?? 0 },
    };
    const od = originalDestination(c);
    if (od !== undefined) landed.originalDst = od;
    c.end(`${JSON.stringify(landed)}\n`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: req.port, host: req.host, ipv6Only: family === 'IPv6' }, () => resolve());
  });
  if (req.transparent === true) makeTransparent(server, family);
  closers.push(() => server.close());
  return { port: (server.address() as net.AddressInfo).port };
}

function connect(req: Extract<WorkerRequest, { op: 'connect' }>): Promise<LandedAt> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => done(new Error(`no answer from ${req.host} port ${req.port} within ${req.timeoutMs} ms`)),
      req.timeoutMs,
    );
    let cleanup = () => {};
    const done = (err: Error | undefined, value?: LandedAt) => {
      clearTimeout(timer);
      cleanup();
      if (err !== undefined) reject(err);
      else resolve(value as LandedAt);
    };
    if (req.proto === 'udp') {
      const sock = createSocket(req.host.includes(':') ? 'udp6' : 'udp4');
      cleanup = () => sock.close();
      sock.on('error', (err) => done(err));
      sock.on('message', (msg) => done(undefined, JSON.parse(msg.toString()) as LandedAt));
      sock.send('hello', req.port, req.host);
      return;
    }
    const c = net.connect({ host: req.host, port: req.port });
    cleanup = () => c.destroy();
    let data = '';
    c.on('data', (chunk) => {
      data += chunk.toString();
      const nl = data.indexOf('\n');
      if (nl >= 0) done(undefined, JSON.parse(data.slice(0, nl)) as LandedAt);
    });
    c.on('error', (err) => done(err));
    c.on('end', () => done(new Error(`connection to ${req.host} port ${req.port} closed without an answer`)));
  });
}

const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const { id, ...req } = JSON.parse(line) as WorkerRequest & { id: number };
  const work: Promise<unknown> = req.op === 'listen' ? listen(req) : connect(req);
  work.then(
    (value) => process.stdout.write(`${JSON.stringify({ id, ok: true, value })}\n`),
    (err: unknown) => process.stdout.write(`${JSON.stringify({ id, ok: false, error: (err as Error).message })}\n`),
  );
});
rl.on('close', () => {
  for (const close of closers) close();
  process.exit(0);
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
