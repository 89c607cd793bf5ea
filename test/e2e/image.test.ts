// The node image `make image` writes to dist/image.oci.tar: containerd imports it, and inside a
// container with the agent's capabilities both executables run and every tool the daemon executes
// works against the container's own network namespace.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startImageRuntime, type ImageRuntime } from './support/imageRuntime.ts';
import { REPO_ROOT } from './support/rigPaths.ts';

const ARCHIVE = join(REPO_ROOT, 'dist/image.oci.tar');
const version = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** The reference recorded in the archive's index (what `ctr images import` names the image). */
function archiveRef(): string {
  const index = JSON.parse(execFileSync('tar', ['-xOf', ARCHIVE, 'index.json'], { encoding: 'utf8' })) as {
    manifests: { annotations?: Record<string, string> }[];
  };
  const ref = index.manifests[0]?.annotations?.['io.containerd.image.name'];
  assert.ok(ref, 'index.json names the image');
  return ref;
}

describe('node image', () => {
  let runtime: ImageRuntime | undefined;
  let image = '';

  before(async () => {
    assert.ok(existsSync(ARCHIVE), `${ARCHIVE} is missing: run \`make image\``);
    image = archiveRef();
    runtime = await startImageRuntime();
    const imported = await runtime.importArchive(ARCHIVE);
    assert.match(imported, new RegExp(image.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  });

  after(async () => {
    await runtime?.stop();
  });

  const run = (argv: readonly string[], options?: { env?: Record<string, string>; input?: string }) => {
    assert.ok(runtime);
    return runtime.run(image, argv, options);
  };

  test('is named <hub>/install-cni:<package version>', () => {
    assert.match(image, new RegExp(`/install-cni:${version.replace(/\./g, '\\.')}$`));
  });

  test('the daemon runs from its entrypoint path, with its native addon extracted to /tmp', async () => {
    assert.equal((await run(['install-cni', '--version'])).stdout.trim(), version);
    const check = (await run(['/usr/local/bin/install-cni', 'check-runtime'])).stdout.trim();
    assert.match(check, /ok$/);
  });

  test('the plugin answers CNI VERSION from the path the daemon copies it from', async () => {
    const out = await run(['/opt/cni/bin/istio-cni'], {
      env: { CNI_COMMAND: 'VERSION', ISTIO_CNI_CHECK_CODE_CACHE: '1' },
      input: '{"cniVersion":"1.1.0"}',
    });
    assert.equal(out.stderr, '');
    const info = JSON.parse(out.stdout) as { supportedVersions?: string[] };
    assert.ok(info.supportedVersions?.includes('1.1.0'), out.stdout);
  });

  for (const flavor of ['', '-nft', '-legacy']) {
    for (const family of ['iptables', 'ip6tables']) {
      test(`${family}${flavor} adds a rule and ${family}${flavor}-save lists it`, async () => {
        // No shell in the image: restore reads its document from stdin, save prints the result.
        const rules = '*mangle\n:ISTIO_PROBE - [0:0]\n-A ISTIO_PROBE -p tcp -m mark --mark 0x539 -j RETURN\nCOMMIT\n';
        await run([`${family}${flavor}-restore`, '--noflush'], { input: rules });
        const saved = (await run([`${family}${flavor}-save`, '-t', 'mangle'])).stdout;
        // Each run is a fresh container and network namespace: the rule does not survive.
        assert.doesNotMatch(saved, /ISTIO_PROBE/);
        const version = (await run([`${family}${flavor}`, '--version'])).stdout;
        assert.match(version, flavor === '-legacy' ? /\(legacy\)/ : /\(nf_tables\)/);
      });
    }
  }

  test('iptables extensions load (dlopened from the image)', async () => {
    const out = await run(['iptables-nft', '-m', 'conntrack', '--help']);
    assert.match(out.stdout, /conntrack match options/);
    const tproxy = await run(['iptables-legacy', '-j', 'TPROXY', '--help']);
    assert.match(tproxy.stdout, /TPROXY target options/);
  });

  test('nft applies and lists a table', async () => {
    const out = await run(['nft', '--version']);
    assert.match(out.stdout, /nftables v\d/);
    await run(['nft', '-c', '-f', '-'], { input: 'table inet istio_probe { chain c { type filter hook output priority 0; tcp dport 15001 counter } }\n' });
  });

  test('ipset creates a set', async () => {
    await run(['ipset', 'create', 'istio-probe', 'hash:ip', 'family', 'inet']);
    assert.match((await run(['ipset', 'version'])).stdout, /ipset v\d/);
  });

  test('ip, nsenter, unshare and cat run', async () => {
    assert.match((await run(['ip', '-j', 'addr', 'show'])).stdout, /"ifname":"lo"/);
    assert.match((await run(['nsenter', '--version'])).stdout, /util-linux/);
    assert.match((await run(['unshare', '--net', '--', 'cat', '/proc/self/net/dev'])).stdout, /lo:/);
  });

  test('the image has no shell and no package manager', async () => {
    for (const absent of ['/bin/sh', '/usr/bin/apt-get', '/usr/bin/dpkg']) {
      assert.ok(runtime);
      const r = await runtime.run(image, [absent], { allowFailure: true });
      assert.notEqual(r.exitCode, 0, `${absent} ran`);
    }
  });
});
