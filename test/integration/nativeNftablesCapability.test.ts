/**
 * NATIVE_NFTABLES on a node whose `nft` cannot serve it (built without JSON output, as some
 * distributions ship it): `dist/install-cni` refuses at start, naming the cause, and installs
 * nothing — instead of installing the plugin and failing every pod's capture at its first read-back.
 * The node's nft is a stand-in on PATH (no root needed).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { DAEMON, daemonEnv, makeHostRoot, PRIMARY_CONFLIST } from '../support/daemonProcess.ts';

/** An nft that answers --version and --check like nft 1.0.6, and -j as one built without JSON support does. */
const FAKE_NFT = `#!/bin/sh
case "$1" in
  --version) echo "nftables v1.0.6 (Lester Gooch #5)" ;;
  -j) echo "Error: JSON support not compiled-in" >&2; exit 1 ;;
  --check) cat >/dev/null ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
`;

describe('native nftables needs JSON output from nft', { timeout: 60_000 }, () => {
  it('without it the daemon exits at start with the cause, and installs nothing', async (t) => {
    const root = makeHostRoot();
    const bin = mkdtempSync(join(tmpdir(), 'fake-nft-'));
    t.after(() => {
      root.remove();
      rmSync(bin, { recursive: true, force: true });
    });
    writeFileSync(join(bin, 'nft'), FAKE_NFT);
    chmodSync(join(bin, 'nft'), 0o755);
    const child = spawn(DAEMON, [], {
      env: daemonEnv(root, {
        PATH: `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`,
        READINESS_PORT: '0',
        MONITORING_PORT: '0',
        NATIVE_NFTABLES: 'true',
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    assert.notEqual(code, 0, output);
    assert.match(output, /NATIVE_NFTABLES=true, but nft has no JSON output \(built without it\?\).*JSON support not compiled-in/);
    assert.deepEqual(readdirSync(root.binTarget), [], 'no plugin installed');
    assert.deepEqual(JSON.parse(readFileSync(join(root.netDir, '10-primary.conflist'), 'utf8')), PRIMARY_CONFLIST, 'conflist untouched');
    assert.equal(existsSync(join(root.runDir, 'pluginevent.sock')), false, 'no hand-off socket');
  });
});
