import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../support/freePort.ts';
import { makeKubeClient, type KubeClient } from './kubeClient.ts';
import { startManagedProcess, waitFor, type ManagedProcess } from './managedProcess.ts';
import { makeClusterPki } from './pki.ts';
import { rigBinary } from './rigPaths.ts';

export const SERVICE_ACCOUNT_ISSUER = 'https://kubernetes.default.svc.cluster.local';

export interface ServiceAccountToken {
  token: string;
  expirationTimestamp: string;
}

export interface TokenRequestOptions {
  audiences?: string[];
  expirationSeconds?: number;
  /** Bind the token to a pod, the way kubelet's projected volume does. */
  boundPod?: { name: string; uid: string };
}

/** A real etcd + kube-apiserver on loopback, with RBAC and service-account token signing. */
export interface Cluster {
  readonly dir: string;
  /** https://127.0.0.1:<port> */
  readonly server: string;
  readonly host: string;
  readonly port: number;
  readonly caFile: string;
  readonly caPem: string;
  /** A static token in group system:masters. */
  readonly adminToken: string;
  /** A kubeconfig carrying adminToken, for helm and friends. */
  readonly adminKubeconfig: string;
  /** The admin client. */
  readonly api: KubeClient;
  /** No credential at all: the API server's anonymous user. */
  readonly anonymous: KubeClient;
  /** Creates the namespace (labels merged in) and its `default` service account; no controller-manager runs to do it. */
  ensureNamespace(name: string, labels?: Record<string, string>): Promise<void>;
  ensureServiceAccount(namespace: string, name: string): Promise<void>;
  /** Mints a token through the TokenRequest API. */
  requestServiceAccountToken(namespace: string, name: string, options?: TokenRequestOptions): Promise<ServiceAccountToken>;
  /** Writes a kubeconfig for this cluster carrying token. */
  writeKubeconfig(path: string, token: string): void;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** Extra kube-apiserver flags, `--name=value`. */
  apiserverFlags?: string[];
}

export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-e2e-cluster-'));
  const processes: ManagedProcess[] = [];
  const stopAll = async () => {
    for (const p of processes.reverse()) await p.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const etcdUrl = await startEtcd(dir, processes);
    return await startApiserver(dir, etcdUrl, processes, options, stopAll);
  } catch (error) {
    await stopAll();
    throw error;
  }
}

async function startEtcd(dir: string, processes: ManagedProcess[]): Promise<string> {
  const clientPort = await freePort();
  const peerPort = await freePort();
  const clientUrl = `http://127.0.0.1:${clientPort}`;
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  const etcd = startManagedProcess(
    'etcd',
    [
      rigBinary('etcd'),
      '--name=e2e',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${clientUrl}`,
      `--advertise-client-urls=${clientUrl}`,
      `--listen-peer-urls=${peerUrl}`,
      `--initial-advertise-peer-urls=${peerUrl}`,
      `--initial-cluster=e2e=${peerUrl}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ],
    join(dir, 'etcd.log'),
  );
  processes.push(etcd);
  await waitFor(
    'etcd /health',
    async () => {
      const res = await fetch(`${clientUrl}/health`);
      const body = (await res.json()) as { health?: string };
      return body.health === 'true' ? true : undefined;
    },
    { process: etcd, timeoutMs: 30_000 },
  );
  return clientUrl;
}

async function startApiserver(
  dir: string,
  etcdUrl: string,
  processes: ManagedProcess[],
  options: ClusterOptions,
  stopAll: () => Promise<void>,
): Promise<Cluster> {
  const pkiDir = join(dir, 'pki');
  mkdirSync(pkiDir);
  const pki = await makeClusterPki(pkiDir);
  const adminToken = randomBytes(24).toString('hex');
  const tokenFile = join(pkiDir, 'tokens.csv');
  writeFileSync(tokenFile, `${adminToken},e2e-admin,${randomUUID()},"system:masters"\n`, { mode: 0o600 });
  const port = await freePort();
  const apiserver = startManagedProcess(
    'kube-apiserver',
    [
      rigBinary('kube-apiserver'),
      `--etcd-servers=${etcdUrl}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${port}`,
      `--cert-dir=${pkiDir}`,
      `--tls-cert-file=${pki.servingCert}`,
      `--tls-private-key-file=${pki.servingKey}`,
      `--token-auth-file=${tokenFile}`,
      '--authorization-mode=Node,RBAC',
      `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
      `--service-account-key-file=${pki.serviceAccountPublicKey}`,
      `--service-account-signing-key-file=${pki.serviceAccountSigningKey}`,
      '--service-cluster-ip-range=10.96.0.0/16',
      '--allow-privileged=true',
      '--profiling=false',
      ...(options.apiserverFlags ?? []),
    ],
    join(dir, 'kube-apiserver.log'),
  );
  processes.push(apiserver);
  const server = `https://127.0.0.1:${port}`;
  const caPem = readFileSync(pki.caCert, 'utf8');
  const api = makeKubeClient(server, caPem, adminToken);
  await waitFor('kube-apiserver /readyz', async () => ((await api.request('GET', '/readyz')).status === 200 ? true : undefined), {
    process: apiserver,
    timeoutMs: 120_000,
    intervalMs: 500,
  });

  const writeKubeconfig = (path: string, token: string) => {
    const kubeconfig = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'e2e', cluster: { server, 'certificate-authority': pki.caCert } }],
      users: [{ name: 'e2e', user: { token } }],
      contexts: [{ name: 'e2e', context: { cluster: 'e2e', user: 'e2e' } }],
      'current-context': 'e2e',
    };
    writeFileSync(path, `${JSON.stringify(kubeconfig, null, 2)}\n`, { mode: 0o600 });
  };
  const adminKubeconfig = join(dir, 'admin.kubeconfig');
  writeKubeconfig(adminKubeconfig, adminToken);

  const createIfMissing = async (path: string, body: unknown) => {
    const res = await api.request('POST', path, body);
    if (res.status !== 201 && res.status !== 409) throw new Error(`POST ${path} answered ${res.status}: ${res.text}`);
  };
  const ensureServiceAccount = (namespace: string, name: string) =>
    createIfMissing(`/api/v1/namespaces/${namespace}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } });

  return {
    dir,
    server,
    host: '127.0.0.1',
    port,
    caFile: pki.caCert,
    caPem,
    adminToken,
    adminKubeconfig,
    api,
    anonymous: api.withToken(null),
    async ensureNamespace(name, labels = {}) {
      await createIfMissing('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } });
      if (Object.keys(labels).length > 0) {
        await api.must('PATCH', `/api/v1/namespaces/${name}`, { metadata: { labels } }, { contentType: 'application/merge-patch+json' });
      }
      await ensureServiceAccount(name, 'default');
    },
    ensureServiceAccount,
    async requestServiceAccountToken(namespace, name, tokenOptions = {}) {
      const spec: Record<string, unknown> = {
        audiences: tokenOptions.audiences ?? [SERVICE_ACCOUNT_ISSUER],
        expirationSeconds: tokenOptions.expirationSeconds ?? 3600,
      };
      if (tokenOptions.boundPod !== undefined) {
        spec.boundObjectRef = { apiVersion: 'v1', kind: 'Pod', ...tokenOptions.boundPod };
      }
      const res = await api.must<{ status: ServiceAccountToken }>('POST', `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
        apiVersion: 'authentication.k8s.io/v1',
        kind: 'TokenRequest',
        spec,
      });
      return res.status;
    },
    writeKubeconfig,
    stop: stopAll,
  };
}
