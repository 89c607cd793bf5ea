import { createServer } from 'node:http';
import { listenHttp, type HttpServerHandle } from '../metrics/metricsServer.ts';

/**
 * `/healthz` is always 200 (the process is alive); `/readyz` is 200 only while `ready()` holds
 * (docs/architecture.md "Readiness"), else 503. `address` '' listens on every address.
 */
export function startHealthServer(port: number, ready: () => boolean, address = ''): Promise<HttpServerHandle> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path === '/healthz') {
      res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok');
    } else if (path === '/readyz') {
      const ok = ready();
      res.writeHead(ok ? 200 : 503, { 'Content-Type': 'text/plain' }).end(ok ? 'ready' : 'not ready');
    } else {
      res.writeHead(404).end();
    }
  });
  return listenHttp(server, port, address || undefined);
}
