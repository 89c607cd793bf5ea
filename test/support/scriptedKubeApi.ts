/**
 * A scripted Kubernetes API for client tests: `handle` answers each request as the test needs
 * (pages, bookmarks, ERROR events, failures) and every request is recorded. `client` talks to it.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { createKubeClient, type KubeClient, type KubeClientOptions } from '@istio-cni/kube';

export interface SeenRequest {
  method: string;
  url: URL;
  headers: IncomingMessage['headers'];
  body: string;
}

export async function scriptedKubeApi(
  t: TestContext,
  handle: (req: SeenRequest, res: ServerResponse) => void,
  clientOptions: KubeClientOptions = {},
): Promise<{ seen: SeenRequest[]; client: KubeClient; url: URL }> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const r = { method: req.method ?? '', url: new URL(req.url ?? '/', 'http://x'), headers: req.headers, body };
      seen.push(r);
      handle(r, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  const client = createKubeClient(
    { server: url, insecureSkipTlsVerify: false, token: () => 'tok', invalidateToken: () => {} },
    clientOptions,
  );
  return { seen, client, url };
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}
