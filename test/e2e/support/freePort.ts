import { createServer } from 'node:net';

/** A loopback TCP port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr !== null ? resolvePort(addr.port) : reject(new Error('no port assigned'))));
    });
  });
}
