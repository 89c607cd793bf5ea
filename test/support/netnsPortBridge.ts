/**
 * Joins TCP ports of the network namespace this process runs in (started with `nsenter --net`)
 * to Unix sockets, whose paths every namespace shares. argv[2] is a JSON `BridgeSpec`:
 * `tcpToUnix` listens on 127.0.0.1:<port> here and forwards each connection to a Unix socket
 * (towards a server in another netns); `unixToTcp` listens on a Unix socket and forwards to
 * 127.0.0.1:<port> here (a server in this netns, reached from outside). Prints `{"ready":true}`
 * once everything listens; exits when stdin closes.
 */
import { rmSync } from 'node:fs';
import net from 'node:net';

export interface BridgeSpec {
  tcpToUnix: { port: number; path: string }[];
  unixToTcp: { path: string; port: number }[];
}

function pipeBoth(a: net.Socket, b: net.Socket): void {
  a.on('error', () => b.destroy());
  b.on('error', () => a.destroy());
  a.pipe(b);
  b.pipe(a);
}

function listen(server: net.Server, options: net.ListenOptions): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options, () => resolve());
  });
}

const spec = JSON.parse(process.argv[2] ?? '{}') as BridgeSpec;
const servers: net.Server[] = [];
for (const { port, path } of spec.tcpToUnix ?? []) {
  const server = net.createServer((c) => pipeBoth(c, net.connect({ path })));
  await listen(server, { host: '127.0.0.1', port });
  servers.push(server);
}
for (const { path, port } of spec.unixToTcp ?? []) {
  rmSync(path, { force: true });
  const server = net.createServer((c) => pipeBoth(c, net.connect({ host: '127.0.0.1', port })));
  await listen(server, { path });
  servers.push(server);
}
process.stdin.on('data', () => {});
process.stdin.on('end', () => {
  for (const s of servers) s.close();
  process.exit(0);
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
