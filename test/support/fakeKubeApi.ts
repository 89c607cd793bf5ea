import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';

/**
 * A tier-1 stand-in for the Kubernetes API: serves realistic core/v1 Pod and Namespace JSON with
 * list, watch (chunked JSON lines, streaming lists included), get, and bearer-token checks. Real API behaviour is covered by
 * the e2e suite; this is enough for the agent's informers and the plugin's degraded reads.
 */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
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
  /** Nodes for GET / JSON-patch PATCH (`/api/v1/nodes/<name>`). */
  upsertNode(node: KubeObject): void;
  getNode(name: string): KubeObject | undefined;
  getPod(namespace: string, name: string): KubeObject | undefined;
  /** core/v1 Events created through `POST /api/v1/namespaces/<ns>/events`. */
  events: KubeObject[];
  /** Bodies of pod DELETEs (DeleteOptions, e.g. preconditions), in order. */
  deleteOptions: unknown[];
  setToken(token: string): void;
  /**
   * Ends every open watch and forgets the event history, like an API server restart plus etcd
   * compaction: clients must re-list (their resume gets `410 Gone`).
   */
  restartAndCompact(): void;
  /** Writes a kubeconfig for this server (the daemon's KUBECONFIG), or for `server` in front of it. */
  writeKubeconfig(path: string, server?: string): void;
  close(): Promise<void>;
}

interface Watcher {
  kind: 'pods' | 'namespaces';
  nodeName?: string;
  res: ServerResponse;
}

export interface FakeKubeApiOptions {
  token?: string;
  /** `false`: refuses streaming lists (`sendInitialEvents`) as an API server with the WatchList feature off does. */
  watchList?: boolean;
}

export async function startFakeKubeApi(options: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
  let token = options.token ?? 'fake-token';
  let rv = 100;
  /** Watches resuming from a resourceVersion below this get `410 Gone` (history compacted). */
  let compactedBelow = 0;
  const pods = new Map<string, KubeObject>();
  const namespaces = new Map<string, KubeObject>();
  const nodes = new Map<string, KubeObject>();
  const events: KubeObject[] = [];
  const deleteOptions: unknown[] = [];
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
  /** Every event since the last compaction, so a watch resuming from a resourceVersion replays what it missed. */
  const history: { kind: Watcher['kind']; type: string; object: KubeObject }[] = [];
  const wants = (w: Watcher, kind: Watcher['kind'], object: KubeObject) =>
    w.kind === kind && !(kind === 'pods' && w.nodeName !== undefined && nodeOf(object) !== w.nodeName);
  const notify = (kind: Watcher['kind'], type: string, object: KubeObject) => {
    history.push({ kind, type, object });
    for (const w of watchers) {
      if (wants(w, kind, object)) w.res.write(JSON.stringify({ type, object }) + '\n');
    }
  };
  /** What the API server answers 422 to: `sendInitialEvents` without its companions, or with WatchList off. */
  const refuseInitialEvents = (q: URLSearchParams): string | undefined => {
    if (q.get('sendInitialEvents') !== 'true') return undefined;
    if (options.watchList === false) return 'sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled';
    if (q.get('resourceVersionMatch') !== 'NotOlderThan')
      return 'resourceVersionMatch: must be NotOlderThan when sendInitialEvents is true';
    if (q.get('allowWatchBookmarks') !== 'true') return 'allowWatchBookmarks: must be true when sendInitialEvents is true';
    return undefined;
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
    const nodeField = field.split(',').find((f) => f.startsWith('spec.nodeName='));
    const nodeName = nodeField === undefined ? undefined : nodeField.slice('spec.nodeName='.length);
    const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    if (req.method !== 'GET') {
      readBody(req).then(
        (body) => handleWrite(req.method ?? '', url.pathname, req.headers['content-type'] ?? '', body, res),
        () => send(res, 400, { kind: 'Status', status: 'Failure', message: 'bad body', code: 400 }),
      );
      return;
    }
    const nodePath = /^\/api\/v1\/nodes\/([^/]+)$/.exec(url.pathname);
    if (nodePath) {
      const node = nodes.get(decodeURIComponent(nodePath[1] ?? ''));
      if (node) send(res, 200, node);
      else notFound(res, `nodes "${nodePath[1]}"`);
      return;
    }
    if (url.pathname === '/api/v1/pods' || url.pathname === '/api/v1/namespaces') {
      const kind = url.pathname.endsWith('pods') ? 'pods' : 'namespaces';
      if (watch) {
        const refused = refuseInitialEvents(url.searchParams);
        if (refused !== undefined) {
          send(res, 422, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: refused, reason: 'Invalid', code: 422 });
          return;
        }
        res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
        res.flushHeaders();
        const from = Number(url.searchParams.get('resourceVersion') ?? '0');
        if (from > 0 && from < compactedBelow) {
          // What the API server sends when the watch's starting point is no longer in etcd.
          const status = {
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            message: 'too old resource version',
            reason: 'Expired',
            code: 410,
          };
          res.end(JSON.stringify({ type: 'ERROR', object: status }) + '\n');
          return;
        }
        const w: Watcher = { kind, res, ...(nodeName !== undefined ? { nodeName } : {}) };
        if (url.searchParams.get('sendInitialEvents') === 'true') {
          // A streaming list (KEP-3157): the current objects as ADDED, then the bookmark that ends them.
          const objects = kind === 'pods' ? [...pods.values()] : [...namespaces.values()];
          for (const o of objects) if (wants(w, kind, o)) res.write(JSON.stringify({ type: 'ADDED', object: o }) + '\n');
          const end = {
            kind: kind === 'pods' ? 'Pod' : 'Namespace',
            apiVersion: 'v1',
            metadata: { resourceVersion: String(rv), annotations: { 'k8s.io/initial-events-end': 'true' } },
          };
          res.write(JSON.stringify({ type: 'BOOKMARK', object: end }) + '\n');
        } else {
          for (const e of history) {
            if (Number(e.object.metadata.resourceVersion) > from && wants(w, e.kind, e.object)) {
              res.write(JSON.stringify({ type: e.type, object: e.object }) + '\n');
            }
          }
        }
        watchers.add(w);
        req.on('close', () => watchers.delete(w));
        return;
      }
      const items =
        kind === 'pods' ? [...pods.values()].filter((p) => nodeName === undefined || nodeOf(p) === nodeName) : [...namespaces.values()];
      send(res, 200, {
        kind: kind === 'pods' ? 'PodList' : 'NamespaceList',
        apiVersion: 'v1',
        metadata: { resourceVersion: String(rv) },
        items,
      });
      return;
    }
    const podPath = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(url.pathname);
    if (podPath) {
      const pod = pods.get(`${decodeURIComponent(podPath[1] ?? '')}/${decodeURIComponent(podPath[2] ?? '')}`);
      if (pod) send(res, 200, pod);
      else notFound(res, `pods "${podPath[2]}"`);
      return;
    }
    const namespacePath = /^\/api\/v1\/namespaces\/([^/]+)$/.exec(url.pathname);
    if (namespacePath) {
      const ns = namespaces.get(decodeURIComponent(namespacePath[1] ?? ''));
      if (ns) send(res, 200, ns);
      else notFound(res, `namespaces "${namespacePath[1]}"`);
      return;
    }
    notFound(res, url.pathname);
  }

  const failure = (res: ServerResponse, code: number, reason: string, message: string) =>
    send(res, code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message, reason, code });

  /** DELETE pod (with preconditions), PATCH pods/status (merge), PATCH node (JSON patch), POST events. */
  function handleWrite(method: string, path: string, contentType: string, body: string, res: ServerResponse): void {
    const parsed = body === '' ? undefined : (JSON.parse(body) as unknown);
    const podPath = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(path);
    if (method === 'DELETE' && podPath) {
      const key = `${decodeURIComponent(podPath[1] ?? '')}/${decodeURIComponent(podPath[2] ?? '')}`;
      const pod = pods.get(key);
      if (!pod) {
        notFound(res, `pods "${podPath[2]}"`);
        return;
      }
      deleteOptions.push(parsed);
      const pre = (parsed as { preconditions?: { uid?: string; resourceVersion?: string } } | undefined)?.preconditions ?? {};
      if (
        (pre.uid !== undefined && pre.uid !== pod.metadata.uid) ||
        (pre.resourceVersion !== undefined && pre.resourceVersion !== pod.metadata.resourceVersion)
      ) {
        failure(res, 409, 'Conflict', `Operation cannot be fulfilled on pods "${podPath[2]}": the precondition does not match`);
        return;
      }
      pods.delete(key);
      notify('pods', 'DELETED', stamp(pod, 'Pod'));
      send(res, 200, pod);
      return;
    }
    const podStatusPath = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/status$/.exec(path);
    if (method === 'PATCH' && podStatusPath) {
      const key = `${decodeURIComponent(podStatusPath[1] ?? '')}/${decodeURIComponent(podStatusPath[2] ?? '')}`;
      const pod = pods.get(key);
      if (!pod) {
        notFound(res, `pods "${podStatusPath[2]}"`);
        return;
      }
      let patched: KubeObject;
      try {
        // Strategic merge is treated as a plain merge: good enough for metadata and status maps.
        patched = (
          contentType.startsWith('application/json-patch+json') ? jsonPatch(pod, parsed as JsonPatchOp[]) : mergePatch(pod, parsed)
        ) as KubeObject;
      } catch (err) {
        failure(res, 422, 'Invalid', (err as Error).message);
        return;
      }
      const stored = stamp(patched, 'Pod');
      pods.set(key, stored);
      notify('pods', 'MODIFIED', stored);
      send(res, 200, stored);
      return;
    }
    const nodePath = /^\/api\/v1\/nodes\/([^/]+)$/.exec(path);
    if (method === 'PATCH' && nodePath) {
      const name = decodeURIComponent(nodePath[1] ?? '');
      const node = nodes.get(name);
      if (!node) {
        notFound(res, `nodes "${nodePath[1]}"`);
        return;
      }
      if (!contentType.startsWith('application/json-patch+json')) {
        failure(res, 415, 'UnsupportedMediaType', `unsupported patch type ${contentType}`);
        return;
      }
      let patched: KubeObject;
      try {
        patched = jsonPatch(node, parsed as JsonPatchOp[]) as KubeObject;
      } catch (err) {
        failure(res, 422, 'Invalid', (err as Error).message);
        return;
      }
      const stored = stamp(patched, 'Node');
      nodes.set(name, stored);
      send(res, 200, stored);
      return;
    }
    if (method === 'POST' && /^\/api\/v1\/namespaces\/([^/]+)\/events$/.test(path)) {
      const event = stamp(parsed as KubeObject, 'Event');
      events.push(event);
      send(res, 201, event);
      return;
    }
    notFound(res, path);
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
    upsertNode(node) {
      nodes.set(node.metadata.name, stamp(node, 'Node'));
    },
    getNode: (name) => nodes.get(name),
    getPod: (namespace, name) => pods.get(`${namespace}/${name}`),
    events,
    deleteOptions,
    upsertNamespace(ns) {
      const type = namespaces.has(ns.metadata.name) ? 'MODIFIED' : 'ADDED';
      const stored = stamp(ns, 'Namespace');
      namespaces.set(ns.metadata.name, stored);
      notify('namespaces', type, stored);
    },
    setToken(t) {
      token = t;
    },
    restartAndCompact() {
      compactedBelow = ++rv;
      history.length = 0;
      for (const w of watchers) w.res.end();
      watchers.clear();
    },
    writeKubeconfig(path, server = url) {
      writeFileSync(
        path,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          '- name: fake',
          '  cluster:',
          `    server: ${server}`,
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

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return patch;
  const out: Record<string, unknown> = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

type JsonPatchOp = { op: 'test' | 'add' | 'replace'; path: string; value: unknown } | { op: 'remove'; path: string };

/** RFC 6902 JSON patch (test, add, replace, remove); a failed test rejects the whole patch. */
function jsonPatch(target: unknown, ops: JsonPatchOp[]): unknown {
  const doc = JSON.parse(JSON.stringify(target)) as unknown;
  for (const op of ops) {
    const parts = op.path
      .split('/')
      .slice(1)
      .map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = parts.pop();
    if (last === undefined) throw new Error(`invalid path ${op.path}`);
    let parent: unknown = doc;
    for (const p of parts) parent = (parent as Record<string, unknown>)?.[p];
    if (typeof parent !== 'object' || parent === null) throw new Error(`path ${op.path} does not exist`);
    const container = parent as Record<string, unknown> & unknown[];
    const index = Array.isArray(container) ? (last === '-' ? container.length : Number(last)) : undefined;
    if (op.op === 'test') {
      const current = index === undefined ? container[last] : container[index];
      if (JSON.stringify(current) !== JSON.stringify(op.value)) throw new Error(`test operation for path ${op.path} failed`);
    } else if (op.op === 'remove') {
      if (index === undefined) delete container[last];
      else if (index >= container.length) throw new Error(`path ${op.path} does not exist`);
      else container.splice(index, 1);
    } else if (index === undefined) container[last] = op.value;
    else if (op.op === 'add') container.splice(index, 0, op.value);
    else container[index] = op.value;
  }
  return doc;
}
