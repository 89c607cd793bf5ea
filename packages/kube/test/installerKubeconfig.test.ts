import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { parse, stringify } from 'yaml';
import { parseInstallerKubeconfig, readKubeconfigFile, readKubeconfigFileLazily, type KubeCredentials } from '../src/index.ts';
import { UPSTREAM_TESTDATA } from '../../../test/support/upstreamTestdata.ts';

const golden = (name: string) => readFileSync(join(UPSTREAM_TESTDATA, 'cni/pkg/install/testdata', name), 'utf8');

/** The installer's kubeconfig for these values, written the way install-cni writes it. */
function installerText(o: { server: string; token: string; caData?: string; clusterName?: string }): string {
  const cluster: Record<string, unknown> =
    o.caData === undefined ? { 'insecure-skip-tls-verify': true } : { 'certificate-authority-data': o.caData };
  cluster.server = o.server;
  const doc = {
    apiVersion: 'v1',
    clusters: [{ cluster, name: o.clusterName ?? 'local' }],
    contexts: [{ context: { cluster: o.clusterName ?? 'local', user: 'istio-cni' }, name: 'istio-cni-context' }],
    'current-context': 'istio-cni-context',
    kind: 'Config',
    users: [{ name: 'istio-cni', user: { token: o.token } }],
  };
  return stringify(doc, { indentSeq: false, lineWidth: 0, sortMapEntries: true });
}

function tempFile(t: TestContext, text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'kubeconfig-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'istio-cni-kubeconfig');
  writeFileSync(file, text);
  return file;
}

function comparable(c: KubeCredentials) {
  return {
    server: c.server.href,
    ca: c.ca?.toString('base64'),
    insecure: c.insecureSkipTlsVerify,
    tlsServerName: c.tlsServerName,
    token: c.token(),
  };
}

/** Deterministic pseudo-random strings over characters that mean something in YAML. */
function* oddStrings(count: number): Generator<string> {
  const chars = 'aZ09_-.:/+=~%@[]{},#&*!|>\'"? \t\\`$^()<;';
  let seed = 7;
  const next = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed;
  };
  for (let i = 0; i < count; i++) {
    let s = '';
    const len = 1 + (next() % 12);
    for (let j = 0; j < len; j++) s += chars[next() % chars.length];
    yield s;
  }
  yield* [
    'true',
    'False',
    'NULL',
    '~',
    '12345',
    '0x1F',
    '0o17',
    '1e3',
    '.inf',
    '-.5',
    'abc:',
    'a: b',
    'a #b',
    'yes',
    'eyJhbGciOi.eyJzdWIi.c2ln',
  ];
}

describe('the installer kubeconfig read without a YAML parser', () => {
  it('reads the upstream goldens (CA data, skip TLS verify) as YAML does', () => {
    for (const name of ['kubeconfig-tls', 'kubeconfig-skip-tls']) {
      const text = golden(name);
      const doc = parseInstallerKubeconfig(text);
      assert.ok(doc, `${name} read directly`);
      assert.deepEqual(doc, parse(text), name);
    }
  });

  it('gives the same credentials as the general reader', async (t) => {
    for (const name of ['kubeconfig-tls', 'kubeconfig-skip-tls']) {
      const file = tempFile(t, golden(name));
      assert.deepEqual(comparable(await readKubeconfigFileLazily(file)), comparable(readKubeconfigFile(file)), name);
    }
  });

  it('reads what the installer writes for real servers and tokens: an IPv6 address, a JWT', () => {
    const text = installerText({
      server: 'https://[fd00:10:96::1]:443',
      token: 'eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJlLV8',
      caData: Buffer.from('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n').toString('base64'),
    });
    const doc = parseInstallerKubeconfig(text);
    assert.ok(doc);
    assert.deepEqual(doc, parse(text));
  });

  it('any token or server YAML would read otherwise is left to the general parser, never read differently', () => {
    let direct = 0;
    for (const value of oddStrings(400)) {
      for (const text of [installerText({ server: 'https://10.96.0.1:443', token: value }), installerText({ server: value, token: 't' })]) {
        const doc = parseInstallerKubeconfig(text);
        if (doc === undefined) continue;
        direct++;
        assert.deepEqual(doc, parse(text), JSON.stringify(value));
      }
    }
    assert.ok(direct > 0, 'some odd values are still plain strings read directly');
  });

  it('text in any other form goes to the general parser', () => {
    const tls = golden('kubeconfig-tls');
    const others = {
      'CRLF line ends': tls.replaceAll('\n', '\r\n'),
      'a comment': `# written by hand\n${tls}`,
      'a comment after a value': tls.replace('token: service_account_token_string', 'token: service_account_token_string # rotated'),
      'a value that is a mapping': tls.replace('token: service_account_token_string', 'token: a: b'),
      'a quoted token': tls.replace('token: service_account_token_string', 'token: "service_account_token_string"'),
      'another key': tls.replace('    server:', '    tls-server-name: api\n    server:'),
      'keys in another order': tls.replace('apiVersion: v1\n', '').replace('kind: Config\n', 'kind: Config\napiVersion: v1\n'),
      'a document start marker': `---\n${tls}`,
      'a blank line at the end': `${tls}\n`,
      'a missing line': tls.replace('kind: Config\n', ''),
      'flow style (JSON)': JSON.stringify(parse(tls)),
      'a token YAML reads as a number': tls.replace('token: service_account_token_string', 'token: 12345'),
      'a token YAML reads as a boolean': tls.replace('token: service_account_token_string', 'token: true'),
      'skip TLS verify false': golden('kubeconfig-skip-tls').replace('insecure-skip-tls-verify: true', 'insecure-skip-tls-verify: false'),
    };
    for (const [what, text] of Object.entries(others)) assert.equal(parseInstallerKubeconfig(text), undefined, what);
  });

  it('such text still gives the general reader`s result, and its errors', async (t) => {
    const tls = golden('kubeconfig-tls');
    const numeric = tempFile(t, tls.replace('token: service_account_token_string', 'token: "12345"'));
    assert.equal((await readKubeconfigFileLazily(numeric)).token(), '12345');
    const flow = tempFile(t, JSON.stringify(parse(tls)));
    assert.deepEqual(comparable(await readKubeconfigFileLazily(flow)), comparable(readKubeconfigFile(flow)));
    const noServer = tempFile(t, tls.replace(/ {4}server: .*\n/, ''));
    await assert.rejects(readKubeconfigFileLazily(noServer), /cluster has no server/);
    const broken = tempFile(t, 'apiVersion: v1\nclusters: [\n');
    await assert.rejects(readKubeconfigFileLazily(broken), (err: Error) => err.name === 'YAMLParseError');
    const unsupported = tempFile(t, tls.replace('    token: service_account_token_string', '    exec: {command: x}'));
    await assert.rejects(readKubeconfigFileLazily(unsupported), /user exec is not supported/);
    await assert.rejects(readKubeconfigFileLazily(join(tmpdir(), 'no-such-dir-kubeconfig', 'x')), /ENOENT/);
  });
});
