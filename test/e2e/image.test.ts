// The node image `make image` writes to dist/image.oci.tar: containerd imports it, and inside a
// container with the agent's capabilities both executables run and every tool the daemon executes
// works against the container's own network namespace.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
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

/** Extracts the archive's one layer into a scratch directory. */
function unpackLayer(): { dir: string; rootfs: string } {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-image-layer-'));
  const index = JSON.parse(execFileSync('tar', ['-xOf', ARCHIVE, 'index.json'], { encoding: 'utf8' })) as {
    manifests: { digest: string }[];
  };
  const blob = (digest: string | undefined) => `blobs/sha256/${(digest ?? '').replace('sha256:', '')}`;
  const manifest = JSON.parse(execFileSync('tar', ['-xOf', ARCHIVE, blob(index.manifests[0]?.digest)], { encoding: 'utf8' })) as {
    layers: { digest: string }[];
  };
  assert.equal(manifest.layers.length, 1);
  execFileSync('tar', ['-xf', ARCHIVE, '-C', dir, blob(manifest.layers[0]?.digest)]);
  const rootfs = join(dir, 'rootfs');
  mkdirSync(rootfs);
  execFileSync('tar', ['-xzf', join(dir, blob(manifest.layers[0]?.digest)), '-C', rootfs]);
  return { dir, rootfs };
}

describe('node image', () => {
  let runtime: ImageRuntime | undefined;
  let image = '';

  before(async () => {
    assert.ok(existsSync(ARCHIVE), `${ARCHIVE} is missing: run \`make image\``);
    image = archiveRef();
    runtime = await startImageRuntime();
    const imported = await runtime.importArchive(ARCHIVE);
    assert.ok(imported.includes(image), `the runtime lists ${image} after the import: ${imported.join(', ')}`);
  });

  after(async () => {
    await runtime?.stop();
  });

  const run = (argv: readonly string[], options?: { env?: Record<string, string>; files?: Record<string, string> }) => {
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

  test('the plugin runs from the path the daemon copies it from', async () => {
    assert.match((await run(['/opt/cni/bin/istio-cni', '--version'])).stdout, new RegExp(`istio-cni ${version.replace(/\./g, '\\.')}`));
  });

  test('the plugin answers CNI VERSION on stdin in the image root filesystem', () => {
    // ctr can lose the end of a container's stdin, and CNI input is stdin: this check chroots into
    // the archive's layer instead, with /proc mounted as every host and container has it (a Bun
    // executable reads its own code through /proc/self/exe and aborts without it), in a mount
    // namespace of its own that ends with the command.
    const { dir, rootfs } = unpackLayer();
    try {
      mkdirSync(join(rootfs, 'proc'), { recursive: true });
      const out = execFileSync('unshare', ['--mount', `--mount-proc=${join(rootfs, 'proc')}`, 'chroot', rootfs, '/opt/cni/bin/istio-cni'], {
        env: { PATH: '/usr/sbin:/usr/bin', CNI_COMMAND: 'VERSION' },
        input: '{"cniVersion":"1.1.0"}',
        encoding: 'utf8',
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const info = JSON.parse(out) as { supportedVersions?: string[] };
      assert.ok(info.supportedVersions?.includes('1.1.0'), out);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const flavor of ['', '-nft', '-legacy']) {
    for (const family of ['iptables', 'ip6tables']) {
      test(`${family}${flavor}-restore commits rules; -save and --version run`, async () => {
        // No shell in the image: restore reads its document from a file.
        const rules = '*mangle\n:ISTIO_PROBE - [0:0]\n-A ISTIO_PROBE -p tcp -m mark --mark 0x539 -j RETURN\nCOMMIT\n';
        await run([`${family}${flavor}-restore`, '--noflush', '/input/rules'], { files: { rules } });
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

  test('nft applies a table', async () => {
    const out = await run(['nft', '--version']);
    assert.match(out.stdout, /nftables v\d/);
    const script = 'table inet istio_probe {\n  chain c {\n    type filter hook output priority 0;\n    tcp dport 15001 counter\n  }\n}\n';
    await run(['nft', '-f', '/input/script'], { files: { script } });
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
