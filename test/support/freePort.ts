import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const LOWEST = 10_000;
/** Ports this process handed out: two calls never return the same one. */
const handedOut = new Set<number>();

/** The first port of the kernel's ephemeral range (source ports of outgoing connections). */
function ephemeralStart(): number {
  try {
    const start = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(start) && start > 0 ? start : 32_768;
  } catch {
    return 32_768;
  }
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A loopback TCP port that was free a moment ago, for a server started next. Chosen below the
 * kernel's ephemeral range: a port from that range (what `listen(0)` gives) can be taken as an
 * outgoing connection's source port before the server binds it, as happened to a cluster's etcd.
 */
export async function freePort(): Promise<number> {
  const highest = ephemeralStart() - 1;
  if (highest - LOWEST < 1_000) throw new Error(`no port range below the ephemeral range (it starts at ${highest + 1})`);
  for (let attempt = 0; attempt < 500; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (highest - LOWEST + 1));
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free loopback port in ${LOWEST}-${highest} after 500 tries`);
}
