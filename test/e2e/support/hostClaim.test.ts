// The local cluster's claim on the machine's cluster names (hostClaim.ts): a temp file, no root.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';
import { type ClaimHolder, claimHost, readClaim, releaseHost } from './hostClaim.ts';

let dir: string;
let claimFile: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'host-claim-'));
  claimFile = join(dir, 'cluster.claim');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Holders of which `running` still run; tearDown records the dir and releases its claim. */
function holders(running: Record<string, string>, problems: string[] = []): ClaimHolder & { tornDown: string[] } {
  const tornDown: string[] = [];
  return {
    tornDown,
    liveProcess: (d) => running[d],
    tearDown: async (d) => {
      tornDown.push(d);
      if (problems.length === 0) releaseHost(claimFile, d);
      return problems;
    },
  };
}

test('an unclaimed machine is claimed for the cluster directory', async () => {
  const h = holders({});
  await claimHost(claimFile, '/src/a/.cluster', h, () => {});
  assert.equal(readClaim(claimFile), '/src/a/.cluster');
  assert.deepEqual(h.tornDown, []);
});

test('a claim whose cluster still runs is refused, naming it and the command that frees it, and kept', async () => {
  writeFileSync(claimFile, JSON.stringify({ clusterDir: '/src/a/.cluster' }));
  const h = holders({ '/src/a/.cluster': 'kube-apiserver, pid 42' });
  await assert.rejects(
    claimHost(claimFile, '/src/b/.cluster', h, () => {}),
    (error: Error) => {
      assert.match(error.message, /cluster in \/src\/a\/\.cluster, which still runs \(kube-apiserver, pid 42\)/);
      assert.match(error.message, /run `make down` in \/src\/a first/);
      return true;
    },
  );
  assert.deepEqual(h.tornDown, []);
  assert.equal(readClaim(claimFile), '/src/a/.cluster');
});

test("a dead cluster's leftovers are torn down from its record, then the machine is claimed", async () => {
  writeFileSync(claimFile, JSON.stringify({ clusterDir: '/src/a/.cluster' }));
  const h = holders({});
  const lines: string[] = [];
  await claimHost(claimFile, '/src/b/.cluster', h, (line) => lines.push(line));
  assert.deepEqual(h.tornDown, ['/src/a/.cluster']);
  assert.equal(readClaim(claimFile), '/src/b/.cluster');
  assert.match(lines.join('\n'), /cluster in \/src\/a\/\.cluster was never taken down/);
});

test('leftovers that cannot be removed fail the claim, listed, and the claim stays', async () => {
  writeFileSync(claimFile, JSON.stringify({ clusterDir: '/src/a/.cluster' }));
  const h = holders({}, ['link istiocni-nodes: Device or resource busy']);
  await assert.rejects(
    claimHost(claimFile, '/src/b/.cluster', h, () => {}),
    /could not remove[\s\S]*istiocni-nodes: Device or resource busy/,
  );
  assert.equal(readClaim(claimFile), '/src/a/.cluster');
});

test('a claim that names no absolute directory is replaced, nothing torn down', async () => {
  for (const text of ['', 'not json', '{"clusterDir":"relative/.cluster"}', '{"clusterDir":"/a\\nb"}', '[]', 'null']) {
    writeFileSync(claimFile, text);
    assert.equal(readClaim(claimFile), undefined, text);
    const h = holders({});
    await claimHost(claimFile, '/src/b/.cluster', h, () => {});
    assert.deepEqual(h.tornDown, [], text);
    assert.equal(readClaim(claimFile), '/src/b/.cluster', text);
    rmSync(claimFile);
  }
});

test('release drops only its own claim', () => {
  writeFileSync(claimFile, JSON.stringify({ clusterDir: '/src/a/.cluster' }));
  releaseHost(claimFile, '/src/b/.cluster');
  assert.equal(JSON.parse(readFileSync(claimFile, 'utf8')).clusterDir, '/src/a/.cluster');
  releaseHost(claimFile, '/src/a/.cluster');
  assert.equal(readClaim(claimFile), undefined);
});
