import { randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../support/freePort.ts';
import { makeKubeClient, type KubeClient } from '../support/kubeClient.ts';
import { makeClientCertificate, makeClusterPki, type ClusterPki } from '../support/pki.ts';
import { rigBinary } from '../support/rigPaths.ts';
import { SERVICE_ACCOUNT_ISSUER } from '../support/cluster.ts';
import { startDetached, waitForDetached } from './detached.ts';
import { APISERVER_PORT, CLUSTER_DIR, type ClusterAddressing, hostPort, KUBECONFIG_FILE, type NodeLayout } from './layout.ts';
import { saveState, type ClusterState } from './state.ts';

// Stop order: kubelets (0) and containerds (1) go first, see node.ts.
const STOP_SCHEDULER = 2;
const STOP_CONTROLLER_MANAGER = 2;
const STOP_APISERVER = 3;
const STOP_ETCD = 4;
const CERT_DAYS = 365;

export interface ControlPlane {
  server: string;
  addressing: ClusterAddressing;
  pki: ClusterPki;
  api: KubeClient;
  /** Writes a kubeconfig for this cluster carrying token. */
  writeKubeconfig(path: string, token: string): void;
  /** Each node's kubelet token (user `system:node:<name>`, group `system:nodes`). */
  nodeTokens: Map<string, string>;
}

/**
 * etcd, kube-apiserver (on the node network's address of the primary family; a Service range per
 * family), kube-controller-manager and kube-scheduler, all detached.
 */
export async function startControlPlane(
  state: ClusterState,
  nodes: readonly NodeLayout[],
  addressing: ClusterAddressing,
): Promise<ControlPlane> {
  const { primary, plans } = addressing;
  const serviceCidrs = plans.map((p) => p.serviceCidr).join(',');
  const dir = join(CLUSTER_DIR, 'control-plane');
  const pkiDir = join(dir, 'pki');
  mkdirSync(pkiDir, { recursive: true });
  const pki = await makeClusterPki(pkiDir, { serverIps: plans.flatMap((p) => [p.controlPlaneIp, p.kubernetesServiceIp]), days: CERT_DAYS });
  // kubelet authenticates the API server's logs/exec/port-forward calls by this certificate.
  const [kubeletClientCert, kubeletClientKey] = await makeClientCertificate(pki, pkiDir, 'apiserver-kubelet-client', {
    user: 'kube-apiserver-kubelet-client',
    group: 'system:masters',
    days: CERT_DAYS,
  });

  const token = () => randomBytes(24).toString('hex');
  const adminToken = token();
  const controllerManagerToken = token();
  const schedulerToken = token();
  const nodeTokens = new Map(nodes.map((n) => [n.name, token()]));
  const tokenLines = [
    `${adminToken},cluster-admin,${randomUUID()},"system:masters"`,
    `${controllerManagerToken},system:kube-controller-manager,${randomUUID()}`,
    `${schedulerToken},system:kube-scheduler,${randomUUID()}`,
    ...[...nodeTokens].map(([name, t]) => `${t},system:node:${name},${randomUUID()},"system:nodes"`),
  ];
  const tokenFile = join(pkiDir, 'tokens.csv');
  writeFileSync(tokenFile, `${tokenLines.join('\n')}\n`, { mode: 0o600 });

  const server = `https://${hostPort(primary.controlPlaneIp, APISERVER_PORT)}`;
  const writeKubeconfig = (path: string, bearer: string) => {
    const kubeconfig = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'istio-cni', cluster: { server, 'certificate-authority': pki.caCert } }],
      users: [{ name: 'istio-cni', user: { token: bearer } }],
      contexts: [{ name: 'istio-cni', context: { cluster: 'istio-cni', user: 'istio-cni' } }],
      'current-context': 'istio-cni',
    };
    writeFileSync(path, `${JSON.stringify(kubeconfig, null, 2)}\n`, { mode: 0o600 });
  };

  const etcdClientPort = await freePort();
  const etcdPeerPort = await freePort();
  const etcdUrl = `http://127.0.0.1:${etcdClientPort}`;
  const etcdPeer = `http://127.0.0.1:${etcdPeerPort}`;
  const etcd = startDetached(
    'etcd',
    [
      rigBinary('etcd'),
      '--name=istio-cni',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${etcdPeer}`,
      `--initial-advertise-peer-urls=${etcdPeer}`,
      `--initial-cluster=istio-cni=${etcdPeer}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ],
    join(dir, 'etcd.log'),
    STOP_ETCD,
  );
  state.processes.push(etcd);
  saveState(state);
  await waitForDetached(
    'etcd /health',
    etcd,
    async () => {
      const body = (await (await fetch(`${etcdUrl}/health`)).json()) as { health?: string };
      return body.health === 'true' ? true : undefined;
    },
    30_000,
  );

  const apiserver = startDetached(
    'kube-apiserver',
    [
      rigBinary('kube-apiserver'),
      `--etcd-servers=${etcdUrl}`,
      `--bind-address=${primary.controlPlaneIp}`,
      `--advertise-address=${primary.controlPlaneIp}`,
      `--secure-port=${APISERVER_PORT}`,
      `--cert-dir=${pkiDir}`,
      `--tls-cert-file=${pki.servingCert}`,
      `--tls-private-key-file=${pki.servingKey}`,
      `--token-auth-file=${tokenFile}`,
      `--kubelet-client-certificate=${kubeletClientCert}`,
      `--kubelet-client-key=${kubeletClientKey}`,
      '--kubelet-preferred-address-types=InternalIP',
      '--authorization-mode=Node,RBAC',
      `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
      `--service-account-key-file=${pki.serviceAccountPublicKey}`,
      `--service-account-signing-key-file=${pki.serviceAccountSigningKey}`,
      `--service-cluster-ip-range=${serviceCidrs}`,
      '--allow-privileged=true',
      '--profiling=false',
    ],
    join(dir, 'kube-apiserver.log'),
    STOP_APISERVER,
  );
  state.processes.push(apiserver);
  saveState(state);
  const caPem = readFileSync(pki.caCert, 'utf8');
  const api = makeKubeClient(server, caPem, adminToken);
  await waitForDetached(
    'kube-apiserver /readyz',
    apiserver,
    async () => ((await api.request('GET', '/readyz')).status === 200 ? true : undefined),
    180_000,
  );
  writeKubeconfig(KUBECONFIG_FILE, adminToken);

  const controllerManagerKubeconfig = join(dir, 'kube-controller-manager.kubeconfig');
  writeKubeconfig(controllerManagerKubeconfig, controllerManagerToken);
  state.processes.push(
    startDetached(
      'kube-controller-manager',
      [
        rigBinary('kube-controller-manager'),
        `--kubeconfig=${controllerManagerKubeconfig}`,
        '--leader-elect=false',
        // No serving endpoint: nothing scrapes it, and it would need its own delegated authn/authz.
        '--secure-port=0',
        // The token controller signs the legacy tokens; the root CA goes into every namespace's kube-root-ca.crt.
        `--service-account-private-key-file=${pki.serviceAccountSigningKey}`,
        `--root-ca-file=${pki.caCert}`,
        `--service-cluster-ip-range=${serviceCidrs}`,
        // Each controller acts as its own service account with its bootstrap role (the
        // system:kube-controller-manager user alone may not run the DaemonSet or root-CA controllers).
        '--use-service-account-credentials=true',
        '--profiling=false',
      ],
      join(dir, 'kube-controller-manager.log'),
      STOP_CONTROLLER_MANAGER,
    ),
  );
  saveState(state);

  const schedulerKubeconfig = join(dir, 'kube-scheduler.kubeconfig');
  writeKubeconfig(schedulerKubeconfig, schedulerToken);
  state.processes.push(
    startDetached(
      'kube-scheduler',
      [rigBinary('kube-scheduler'), `--kubeconfig=${schedulerKubeconfig}`, '--leader-elect=false', '--secure-port=0', '--profiling=false'],
      join(dir, 'kube-scheduler.log'),
      STOP_SCHEDULER,
    ),
  );
  saveState(state);

  return { server, addressing, pki, api, writeKubeconfig, nodeTokens };
}
