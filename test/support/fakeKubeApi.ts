import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';

/**
 * A tier-1 stand-in for the Kubernetes API: serves realistic core/v1 Pod and Namespace JSON with
 * list, watch (chunked JSON lines), get, and bearer-token checks. Real API behaviour is covered by
 * the e2e suite; this is enough for the agent's informers and the plugin's degraded reads.
 */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

export interface FakeKubeApi {
  url: string;
  token: string;
  /** Requests served, as `METHOD path?query` (watch streams count once). */
  requests: string[];
  upsertPod(pod: KubeObject): void;
  deletePod(namespace: string, name: string): void;
  upsertNamespace(ns: KubeObject): void;
  setToken(token: string): void;
  /** Writes a kubeconfig for this server (the daemon's KUBECONFIG). */
  writeKubeconfig(path: string): void;
  close(): Promise<void>;
}

interface Watcher {
  kind: 'pods' | 'namespaces';
  nodeName?: string;
  res: ServerResponse;
}

export async function startFakeKubeApi(options: { token?: string } = {}): Promise<FakeKubeApi> {
  let token = options.token ?? 'fake-token';
  let rv = 100;
  const pods = new Map<string, KubeObject>();
  const namespaces = new Map<string, KubeObject>();
  const watchers = new Set<Watcher>();
  const requests: string[] = [];

  const nodeOf = (pod: KubeObject) => (pod.spec?.nodeName as string | undefined) ?? '';
  const send = (res: ServerResponse, status: number, body: unknown) => {
    const payload = JSON.stringify(body);
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) });
    res.end(payload);
  };
  const notFound = (res: ServerResponse, what: string) =>
    send(res, 404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: `${what} not found`, reason: 'NotFound', code: 404 });
  const notify = (kind: Watcher['kind'], type: string, object: KubeObject) => {
    for (const w of watchers) {
      if (w.kind !== kind) continue;
      if (kind === 'pods' && w.nodeName !== undefined && nodeOf(object) !== w.nodeName) continue;
      w.res.write(JSON.stringify({ type, object }) + '\n');
    }
  };
  const stamp = (o: KubeObject, kind: string): KubeObject => ({
    apiVersion: 'v1',
    kind,
    ...o,
    metadata: { uid: `uid-${o.metadata.namespace ?? ''}-${o.metadata.name}`, ...o.metadata, resourceVersion: String(++rv) },
  });

  function handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    requests.push(`${req.method} ${url.pathname}${url.search}`);
    if (req.headers.authorization !== `Bearer ${token}`) {
      send(res, 401, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'Unauthorized', reason: 'Unauthorized', code: 401 });
      return;
    }
    const field = url.searchParams.get('fieldSelector') ?? '';
    const nodeName = field.startsWith('spec.nodeName=') ? field.slice('spec.nodeName='.length) : undefined;
    const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    let m: RegExpExecArray | null;
    if (url.pathname === '/api/v1/pods' || url.pathname === '/api/v1/namespaces') {
      const kind = url.pathname.endsWith('pods') ? 'pods' : 'namespaces';
      if (watch) {
        res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
        res.flushHeaders();
        const w: Watcher = { kind, res, ...(nodeName !== undefined ? { nodeName } : {}) };
        watchers.add(w);
        req.on('close', () => watchers.delete(w));
        return;
      }
      const items = kind === 'pods' ? [...pods.values()].filter((p) => nodeName === undefined || nodeOf(p) === nodeName) : [...namespaces.values()];
      send(res, 200, { kind: kind === 'pods' ? 'PodList' : 'NamespaceList', apiVersion: 'v1', metadata: { resourceVersion: String(rv) }, items });
      return;
    }
    if ((m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(url.pathname))) {
      const pod = pods.get(`${decodeURIComponent(m[1] ?? '')}/${decodeURIComponent(m[2] ?? '')}`);
      if (pod) send(res, 200, pod);
      else notFound(res, `pods "${m[2]}"`);
      return;
    }
    if ((m = /^\/api\/v1\/namespaces\/([^/]+)$/.exec(url.pathname))) {
      const ns = namespaces.get(decodeURIComponent(m[1] ?? ''));
      if (ns) send(res, 200, ns);
      else notFound(res, `namespaces "${m[1]}"`);
      return;
    }
    notFound(res, url.pathname);
  }

  const server: Server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    get token() {
      return token;
    },
    requests,
    upsertPod(pod) {
      const key = `${pod.metadata.namespace}/${pod.metadata.name}`;
      const type = pods.has(key) ? 'MODIFIED' : 'ADDED';
      const stored = stamp(pod, 'Pod');
      pods.set(key, stored);
      notify('pods', type, stored);
    },
    deletePod(namespace, name) {
      const key = `${namespace}/${name}`;
      const pod = pods.get(key);
      if (!pod) return;
      pods.delete(key);
      notify('pods', 'DELETED', stamp(pod, 'Pod'));
    },
    upsertNamespace(ns) {
      const type = namespaces.has(ns.metadata.name) ? 'MODIFIED' : 'ADDED';
      const stored = stamp(ns, 'Namespace');
      namespaces.set(ns.metadata.name, stored);
      notify('namespaces', type, stored);
    },
    setToken(t) {
      token = t;
    },
    writeKubeconfig(path) {
      writeFileSync(
        path,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          '- name: fake',
          '  cluster:',
          `    server: ${url}`,
          '    insecure-skip-tls-verify: true',
          'users:',
          '- name: fake',
          '  user:',
          `    token: ${token}`,
          'contexts:',
          '- name: fake',
          '  context:',
          '    cluster: fake',
          '    user: fake',
          'current-context: fake',
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
    },
    async close() {
      for (const w of watchers) w.res.end();
      watchers.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
