/**
 * (root, real kernel) A tenant holds NET_ADMIN in its own sidecar pod and puts state into the pod's
 * netns that imitates ours, to steer the agent: `dist/install-cni` with native nftables and a 1 s
 * VERIFY_INTERVAL, two sidecar pods added through the built plugin. The tenant adds, through nft's
 * JSON input, tables (with a chain, without) whose names would make an nft script include a canary
 * file, a table whose name forges listing lines, and removes the agent's rules. The agent must report
 * the imitations, remove them (by name, through nft's JSON input) and repair its own rules, and the canary's contents must appear nowhere it writes:
 * logs, metrics, files. The neighbour pod keeps its rules untouched.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { metric, morePasses } from '../support/daemonMetrics.ts';
import { kernelSkip } from '../support/hostTools.ts';
import { netnsRuleset } from '../support/netnsRuleset.ts';
import { addSidecarPod } from '../support/addSidecarPod.ts';
import { runDoctor } from '../support/runDoctor.ts';
import { verifyingRig } from '../support/verifyingRig.ts';

/** Every regular file under `dir` (the agent's host root: what it installs and keeps). */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

/** What the tenant runs in its pod: nft's JSON input takes table names nft's own syntax could not express. */
function tenantNft(dir: string, netns: string, commands: unknown[]): void {
  // A file, not stdin: nft opens /dev/stdin, which a socket (what spawnSync hands it) does not offer.
  const file = join(dir, 'tenant.json');
  writeFileSync(file, JSON.stringify({ nftables: commands }));
  execFileSync('nsenter', [`--net=${netns}`, '--', 'nft', '-j', '-f', file], { stdio: 'pipe' });
}

describe('a tenant with NET_ADMIN in its pod cannot steer the agent [native nftables]', { skip: kernelSkip, timeout: 180_000 }, () => {
  const agent = verifyingRig({ NATIVE_NFTABLES: 'true' });
  let dir: string;
  let canary: string;
  let secret: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'hostile-tenant-'));
    canary = join(dir, 'canary');
    secret = `canary-${randomBytes(12).toString('hex')}`;
    writeFileSync(canary, `${secret}\n`, { mode: 0o600 });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('tables imitating ours, with chains or without, are reported and removed by name through nft JSON input, the canary never read; the pod is repaired, its neighbour untouched', async (t) => {
    const rig = agent();
    const tenant = await addSidecarPod(t, rig, 'tenant');
    const neighbour = await addSidecarPod(t, rig, 'neighbour');
    const programmed = await netnsRuleset(tenant.pod.path);
    const neighbourRules = await netnsRuleset(neighbour.pod.path);

    const withChain = `istio-proxy-x;include"${canary}"`;
    const forger = 'istio-proxy-nat {\n}\ntable inet istio-proxy-forged';
    tenantNft(dir, tenant.pod.path, [
      { add: { table: { family: 'inet', name: withChain } } },
      { add: { chain: { family: 'inet', table: withChain, name: 'c', type: 'filter', hook: 'output', prio: 0, policy: 'accept' } } },
      // No chains: found only from `nft list chains`' header lines. This name forges two of them
      // (ours, and `istio-proxy-forged`): neither is taken for a table, and the table itself is not seen.
      { add: { table: { family: 'inet', name: forger } } },
      { add: { table: { family: 'ip', name: `istio-proxy-y;include"${canary}"` } } },
      { delete: { table: { family: 'inet', name: 'istio-proxy-nat' } } },
    ]);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/tenant', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    const drift = JSON.stringify(line.drift);
    assert.ok(drift.includes('unexpected table inet \\"istio-proxy-x;include'), drift);
    assert.ok(drift.includes('unexpected table ip \\"istio-proxy-y;include'), drift);
    assert.ok(drift.includes('(no chains)'), `the table without chains is named as such: ${drift}`);
    assert.ok(!drift.includes('istio-proxy-forged'), `a forged header line is no table: ${drift}`);
    assert.ok(drift.includes('table inet istio-proxy-nat missing'), drift);
    await morePasses(rig.daemon, 2);
    tenantNft(dir, tenant.pod.path, [{ delete: { table: { family: 'inet', name: forger } } }]);
    assert.equal(await netnsRuleset(tenant.pod.path), programmed, "the tenant's imitations are gone and ours are back");
    assert.equal(await netnsRuleset(neighbour.pod.path), neighbourRules, 'the neighbour is untouched');
    const kinds = (line.drift as { kind: string }[]).map((d) => d.kind);
    for (const kind of kinds)
      assert.equal(await metric(rig.daemon, 'istio_cni_drift_total', { kind, action: 'repaired' }), 1, `${kind} counted once`);

    const metrics = await (await fetch(`http://127.0.0.1:${rig.daemon.monitoringPort}/metrics`)).text();
    for (const [where, text] of [
      ['logs', rig.daemon.lines.join('\n')],
      ['metrics', metrics],
    ] as const) {
      assert.ok(!text.includes(secret), `the canary's contents are in the agent's ${where}`);
    }
    const written = filesUnder(rig.root.dir);
    assert.ok(written.length > 0, 'the agent wrote files (conflist, kubeconfig, attachments)');
    assert.deepEqual(
      written.filter((f) => readFileSync(f).includes(secret)),
      [],
      "the canary's contents are in no file the agent wrote",
    );
    assert.ok(!rig.daemon.lines.some((l) => /"level":"error"/.test(l)), rig.daemon.lines.filter((l) => l.includes('error')).join('\n'));
  });
});

describe('a tenant with NET_ADMIN in its pod cannot steer the agent [native nftables, report-only]', {
  skip: kernelSkip,
  timeout: 180_000,
}, () => {
  const agent = verifyingRig({ NATIVE_NFTABLES: 'true', VERIFY_REPORT_ONLY: 'true' });
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'hostile-tenant-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('doctor names a table imitating ours, escaped, and reads nothing it names', async (t) => {
    const rig = agent();
    const canary = join(dir, 'canary');
    const secret = `canary-${randomBytes(12).toString('hex')}`;
    writeFileSync(canary, `${secret}\n`, { mode: 0o600 });
    const tenant = await addSidecarPod(t, rig, 'tenant-doctor');
    tenantNft(dir, tenant.pod.path, [{ add: { table: { family: 'inet', name: `istio-proxy-x;include"${canary}"` } } }]);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/tenant-doctor', 20_000);
    assert.equal(line.action, 'reported', JSON.stringify(line));
    const shown = runDoctor(rig, ['default/tenant-doctor']);
    assert.equal(shown.code, 1, shown.stdout);
    const problem = shown.report.problems.find((p) => p.startsWith('default/tenant-doctor:'));
    assert.ok(problem !== undefined, shown.stdout);
    const name = `istio-proxy-x;include"${canary}"`;
    // Shown JSON-escaped and cut to 64 characters (a TMPDIR may make the path long).
    const shownName = name.length > 64 ? `${name.slice(0, 64)}…` : name;
    assert.ok(problem.includes(`unexpected table inet ${JSON.stringify(shownName)} (no chains)`), problem);
    assert.ok(!shown.stdout.includes(secret), "the canary's contents are in doctor's output");
    assert.ok(!rig.daemon.lines.join('\n').includes(secret), "the canary's contents are in the agent's logs");
  });
});

describe('a tenant with NET_ADMIN in its pod cannot steer the agent [iptables-nft]', { skip: kernelSkip, timeout: 180_000 }, () => {
  const agent = verifyingRig({ FORCE_IPTABLES_BINARY: 'nft' });

  it('a comment that forges a rule line and a chain named with a quote: the jump is repaired, nothing of theirs is echoed or lost', async (t) => {
    const rig = agent();
    const tenant = await addSidecarPod(t, rig, 'tenant-xt');
    const inPod = (...argv: string[]) => execFileSync('nsenter', [`--net=${tenant.pod.path}`, '--', ...argv], { stdio: 'pipe' });
    // A comment whose newline makes iptables-save print a line that looks like our jump.
    inPod('iptables-nft', '-t', 'nat', '-I', 'OUTPUT', '1', '-m', 'comment', '--comment', 'x\n-A OUTPUT -j ISTIO_OUTPUT', '-j', 'RETURN');
    inPod('iptables-nft', '-t', 'nat', '-N', 'we"ird');
    inPod('iptables-nft', '-t', 'nat', '-A', 'we"ird', '-j', 'RETURN');
    inPod('iptables-nft', '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT');
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/tenant-xt', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    await morePasses(rig.daemon, 2);
    const save = execFileSync('nsenter', [`--net=${tenant.pod.path}`, '--', 'iptables-nft-save', '-t', 'nat'], { encoding: 'utf8' });
    assert.equal((save.match(/^-A OUTPUT -j ISTIO_OUTPUT$/gm) ?? []).length, 1, `our jump is back, once:\n${save}`);
    assert.match(save, /--comment "x\n-A OUTPUT -j ISTIO_OUTPUT" -j RETURN/, "the tenant's own rule is left as it was");
    assert.match(save, /^-A we"ird -j RETURN$/m, "the tenant's chain is left as it was");
    assert.ok(!rig.daemon.lines.some((l) => /"level":"error"/.test(l)), rig.daemon.lines.filter((l) => l.includes('error')).join('\n'));
  });
  it('a flood larger than the agent reads (18 MB of rules, printed before ours): reported, never acted on half-read, and verified again once gone', async (t) => {
    const rig = agent();
    const tenant = await addSidecarPod(t, rig, 'tenant-flood');
    const neighbour = await addSidecarPod(t, rig, 'neighbour-flood');
    const save = (netns: string, table: string) =>
      execFileSync('nsenter', [`--net=${netns}`, '--', 'iptables-nft-save', '-t', table], {
        encoding: 'utf8',
        maxBuffer: 64 << 20,
      }).replace(/^#.*\n/gm, '');
    const tenantNat = save(tenant.pod.path, 'nat');
    const neighbourNat = save(neighbour.pod.path, 'nat');
    // iptables-nft-save prints filter before nat: a read cut at the agent's 16 MiB limit would
    // hold none of our nat rules, and a repair from it would fail at every pass (chains exist).
    const rules = 60_000;
    const comment = 'x'.repeat(240);
    const lines = ['*filter', ':TENANT - [0:0]'];
    for (let i = 0; i < rules; i++)
      lines.push(`-A TENANT -s 10.200.${(i >> 8) & 255}.${i & 255}/32 -m comment --comment "${comment}" -j RETURN`);
    lines.push('COMMIT', '');
    const inPod = (argv: string[], input = '') =>
      execFileSync('nsenter', [`--net=${tenant.pod.path}`, '--', ...argv], { input, stdio: ['pipe', 'ignore', 'pipe'] });
    inPod(['iptables-nft-restore', '--noflush'], lines.join('\n'));

    const reported = await rig.daemon.waitForLog((e) => e.msg === 'pod could not be verified' && e.pod === 'default/tenant-flood', 30_000);
    assert.match(String(reported.error), /printed more than 16777216 bytes; stopped and not read/, JSON.stringify(reported));
    assert.ok(String(reported.error).length < 1000, 'the report names the limit, not what was printed');
    await morePasses(rig.daemon, 3);
    const acted = rig.daemon.entries.filter((e) => e.pod === 'default/tenant-flood' && e.msg === 'pod drifted from its plan');
    assert.deepEqual(acted, [], 'nothing was repaired from a partial read');
    assert.equal(save(tenant.pod.path, 'nat'), tenantNat, "the tenant pod's capture is as it was");
    assert.equal(save(neighbour.pod.path, 'nat'), neighbourNat, 'the neighbour is untouched');
    assert.ok((await metric(rig.daemon, 'istio_cni_drift_total', { kind: 'unverifiable', action: 'reported' })) >= 1);

    inPod(['iptables-nft', '-t', 'filter', '-F', 'TENANT']);
    inPod(['iptables-nft', '-t', 'filter', '-X', 'TENANT']);
    inPod(['iptables-nft', '-t', 'nat', '-D', 'OUTPUT', '-j', 'ISTIO_OUTPUT']);
    const line = await rig.daemon.waitForLog((e) => e.msg === 'pod drifted from its plan' && e.pod === 'default/tenant-flood', 20_000);
    assert.equal(line.action, 'repaired', JSON.stringify(line));
    assert.equal(save(tenant.pod.path, 'nat'), tenantNat, 'once the flood is gone the pod is verified and repaired again');
    assert.ok(!rig.daemon.lines.some((l) => /"level":"error"/.test(l)), rig.daemon.lines.filter((l) => l.includes('error')).join('\n'));
  });
});
