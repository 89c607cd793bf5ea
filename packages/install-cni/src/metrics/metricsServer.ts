import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from '@istio-cni/handoff';

export interface HttpServerHandle {
  port: number;
  close(): Promise<void>;
}

export async function listenHttp(server: Server, port: number, host?: string): Promise<HttpServerHandle> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Prometheus text on `GET /metrics` (`:15014` by default); `address` '' listens on every address. */
export function startMetricsServer(port: number, registry: Registry, logger: Logger, address = ''): Promise<HttpServerHandle> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text),
      (err: unknown) => {
        logger.error('failed to render metrics', { error: String(err) });
        res.writeHead(500).end();
      },
    );
  });
  return listenHttp(server, port, address || undefined);
}
