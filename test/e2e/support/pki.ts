import { generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCommand } from './runCommand.ts';

export interface ClusterPki {
  caCert: string;
  caKey: string;
  servingCert: string;
  servingKey: string;
  serviceAccountPublicKey: string;
  serviceAccountSigningKey: string;
}

export interface ClusterPkiOptions {
  /** IP addresses the API server's certificate is valid for besides 127.0.0.1 (its bind address, the Service IP). */
  serverIps?: readonly string[];
  /** Validity of every certificate; the e2e suites need hours, a `make up` cluster may live longer. */
  days?: number;
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A throwaway CA, an API server serving certificate for loopback, and the service-account signing keys. */
export async function makeClusterPki(dir: string, options: ClusterPkiOptions = {}): Promise<ClusterPki> {
  const pki: ClusterPki = {
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    servingCert: join(dir, 'apiserver.crt'),
    servingKey: join(dir, 'apiserver.key'),
    serviceAccountPublicKey: join(dir, 'sa.pub'),
    serviceAccountSigningKey: join(dir, 'sa.key'),
  };
  await runCommand([
    'openssl',
    'req',
    '-x509',
    ...EC_KEY,
    '-keyout',
    pki.caKey,
    '-out',
    pki.caCert,
    '-days',
    String(options.days ?? 2),
    '-subj',
    '/CN=e2e-cluster-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  const csr = join(dir, 'apiserver.csr');
  const ext = join(dir, 'apiserver.ext');
  await runCommand(['openssl', 'req', '-new', ...EC_KEY, '-keyout', pki.servingKey, '-out', csr, '-subj', '/CN=kube-apiserver']);
  writeFileSync(
    ext,
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      `subjectAltName=${['127.0.0.1', ...(options.serverIps ?? [])].map((ip) => `IP:${ip}`).join(',')},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local`,
      '',
    ].join('\n'),
  );
  await signWithCa(pki, csr, ext, options.days ?? 2, pki.servingCert);
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(pki.serviceAccountPublicKey, publicKey.export({ type: 'spki', format: 'pem' }));
  writeFileSync(pki.serviceAccountSigningKey, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return pki;
}

/** A client certificate signed by the cluster CA (`CN` = user, `O` = group); returns [cert, key]. */
export async function makeClientCertificate(
  pki: ClusterPki,
  dir: string,
  name: string,
  subject: { user: string; group: string; days?: number },
): Promise<[string, string]> {
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  await runCommand(['openssl', 'req', '-new', ...EC_KEY, '-keyout', key, '-out', csr, '-subj', `/O=${subject.group}/CN=${subject.user}`]);
  writeFileSync(
    ext,
    ['basicConstraints=critical,CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment', 'extendedKeyUsage=clientAuth', ''].join(
      '\n',
    ),
  );
  await signWithCa(pki, csr, ext, subject.days ?? 2, cert);
  return [cert, key];
}

/** Signs a CSR with the cluster CA, extensions from `ext`. */
async function signWithCa(pki: ClusterPki, csr: string, ext: string, days: number, out: string): Promise<void> {
  const ca = ['-CA', pki.caCert, '-CAkey', pki.caKey, '-CAcreateserial'];
  await runCommand(['openssl', 'x509', '-req', '-in', csr, ...ca, '-days', String(days), '-extfile', ext, '-out', out]);
}
